// Tiled matrix-matrix product for prefill: the same result as matmul.wgsl (without LAST_ONLY), for many tokens:
//   Y[t, YOFF + n] (+)= sum_k W[n, k] * xin[t, k],  xin = X (NORM false) or rmsnorm(X[t]) * G (NORM true)
//   GLU: Y[t, YOFF + n] = act(W[n, :] · xin[t]) * (W[N + n, :] · xin[t])   (act: SiLU, or GELU-tanh with GELU)
// Each workgroup computes a tile of TR rows x TT tokens (TR, TT: 32 or 64) with KS groups of TR * TT / 16 threads,
// each thread 4 rows x 4 tokens held in vec4 accumulators (one vec4 of 4 rows per token; GLU: 4 more for the up
// rows). It walks K in steps of KT: the weights of the step are dequantized once into workgroup memory (the format's
// w8(row, oct) gives 8 at a time) and the inputs of the step loaded (normalised) beside them, both stored k-major as
// vec4s of 4 rows / 4 tokens, so each k costs a thread one vec4 read of weights (two with GLU), one of inputs and 16
// (32) FMAs. K group g takes the k's g KT / KS .. of each step; the groups' sums are added at the end through
// workgroup memory (more threads for products with few tiles). The next step's weights and inputs are fetched into
// registers while the current step is being multiplied.
// So each weight is read and dequantized once per TT tokens instead of once per token.
//
// Constants: K (a multiple of KT and of the format's block), N, NORM, EPS, ACCUM, GLU, GELU, YSTRIDE, YOFF,
//   TR, TT, KS (tile rows, tokens, K groups), KT (K per step, such that each thread loads at most 2 items of
//   weights and 2 of inputs a step, KT / KS >= U), U (k's per inner-loop iteration: 1 or 2); kernels.matmul_tiled.
// Bindings:
//   0 W: array<u32>              packed weights, N rows (2N with GLU)
//   1 X: array<vec4<f32>>        [n_tokens, K]
//   2 Y: array<f32>              [n_tokens, YSTRIDE]
//   3 step: uniform Step
//   4 G: array<vec4<f32>>        [K] the norm's gain (read only with NORM; bind any buffer otherwise)
// Dispatch: (ceil(N / TR), ceil(n_tokens_max / TT)) workgroups of KS * TR * TT / 16 threads (kernels.tiled_groups);
// token tiles past the pass's end return at once.
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;
@group(0) @binding(4) var<storage, read> G: array<vec4<f32>>;

const K4: u32 = K / 4u;
const TR4: u32 = TR / 4u;                        // vec4s of rows a k
const TT4: u32 = TT / 4u;                        // vec4s of tokens a k
const HW: u32 = TR4 * TT4;                       // threads of one K group
const WG: u32 = HW * KS;                         // threads
const KH: u32 = KT / KS;                         // K per step of one K group
const HALVES: u32 = select(1u, 2u, GLU);         // gate (and up) rows
const W_ITEMS: u32 = HALVES * TR * (KT / 8u);    // w8 calls a step
const X_ITEMS: u32 = TT * (KT / 4u);             // vec4 input reads a step
const SPLIT: u32 = WG / TT;                      // threads sharing a token's sum of squares

var<workgroup> ws: array<vec4<f32>, HALVES * KT * TR4>;   // weights of the step, [half][k][row / 4]
var<workgroup> xs: array<vec4<f32>, KT * TT4>;            // inputs of the step, [k][token / 4]
var<workgroup> scale: array<f32, TT>;                     // per-token 1/rms (1 without NORM)
var<workgroup> part_ss: array<f32, WG>;

// Weight item i of the step at k0: rows fastest (so stores are conflict-free), then octets, then gate/up.
fn fetch_w(row0: u32, k0: u32, i: u32) -> array<vec4<f32>, 2> {
    let r = i % TR;
    let o = (i / TR) % (KT / 8u);
    let h = i / (TR * (KT / 8u));
    if (i >= W_ITEMS || row0 + r >= N) {
        return array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    }
    return w8(row0 + r + h * N, k0 / 8u + o);
}

fn put_w(i: u32, w: array<vec4<f32>, 2>) {
    if (i >= W_ITEMS) {
        return;
    }
    let r = i % TR;
    let o = (i / TR) % (KT / 8u);
    let h = i / (TR * (KT / 8u));
    let base = (h * KT + o * 8u) * TR4 + r / 4u;
    let c = r % 4u;
    ws[base][c] = w[0].x;
    ws[base + TR4][c] = w[0].y;
    ws[base + 2u * TR4][c] = w[0].z;
    ws[base + 3u * TR4][c] = w[0].w;
    ws[base + 4u * TR4][c] = w[1].x;
    ws[base + 5u * TR4][c] = w[1].y;
    ws[base + 6u * TR4][c] = w[1].z;
    ws[base + 7u * TR4][c] = w[1].w;
}

// Input item i of the step at k0: tokens fastest, then vec4s of k. Returns X * G (the gain, with NORM).
fn fetch_x(tok0: u32, k0: u32, i: u32, n_tokens: u32) -> vec4<f32> {
    let tt = i % TT;
    let k4 = i / TT;
    if (i >= X_ITEMS || tok0 + tt >= n_tokens) {
        return vec4<f32>(0.0);
    }
    var v = X[(tok0 + tt) * K4 + k0 / 4u + k4];
    if (NORM) {
        v *= G[k0 / 4u + k4];
    }
    return v;
}

fn put_x(i: u32, v: vec4<f32>) {
    if (i >= X_ITEMS) {
        return;
    }
    let tt = i % TT;
    let k4 = i / TT;
    let base = k4 * 4u * TT4 + tt / 4u;
    let c = tt % 4u;
    let s = v * scale[tt];
    xs[base][c] = s.x;
    xs[base + TT4][c] = s.y;
    xs[base + 2u * TT4][c] = s.z;
    xs[base + 3u * TT4][c] = s.w;
}

fn store1(t: u32, n: u32, acc: f32, up: f32) {
    if (n < N) {
        var v = acc;
        if (GLU) {
            v = gate_act(v) * up;
        }
        let y = t * YSTRIDE + YOFF + n;
        if (ACCUM) {
            Y[y] += v;
        } else {
            Y[y] = v;
        }
    }
}

// Outputs of one token t for rows n0 .. n0 + 4: acc (gate) and up (GLU).
fn store(t: u32, n0: u32, acc: vec4<f32>, up: vec4<f32>) {
    if (t < step.n_tokens) {
        store1(t, n0, acc.x, up.x);
        store1(t, n0 + 1u, acc.y, up.y);
        store1(t, n0 + 2u, acc.z, up.z);
        store1(t, n0 + 3u, acc.w, up.w);
    }
}

// Sum of v over the K groups, for group 0 (tree of halvings through ws, which holds at least WG / 2 vec4s).
fn group_sum(v: vec4<f32>, kg: u32, lt: u32) -> vec4<f32> {
    var s = v;
    for (var m = KS / 2u; m > 0u; m /= 2u) {
        workgroupBarrier();
        if (kg >= m && kg < 2u * m) {
            ws[(kg - m) * HW + lt] = s;
        }
        workgroupBarrier();
        if (kg < m) {
            s += ws[kg * HW + lt];
        }
    }
    return s;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let row0 = wid.x * TR;
    let tok0 = wid.y * TT;
    let n_tokens = step.n_tokens;
    if (tok0 >= n_tokens) {
        return;
    }
    // per-token RMSNorm scales: SPLIT threads a token, each summing a strided part of the row
    let st = tid / SPLIT;
    var ss = 0.0;
    if (NORM && tok0 + st < n_tokens) {
        for (var k = tid % SPLIT; k < K4; k += SPLIT) {
            let v = X[(tok0 + st) * K4 + k];
            ss += dot(v, v);
        }
    }
    part_ss[tid] = ss;
    workgroupBarrier();
    if (tid < TT) {
        var total = 0.0;
        for (var i = 0u; i < SPLIT; i++) { total += part_ss[tid * SPLIT + i]; }
        scale[tid] = select(1.0, 1.0 / sqrt(total / f32(K) + EPS), NORM);
    }

    let lt = tid % HW;        // this thread in its K group
    let kg = tid / HW;        // its K group: k0 + kg KH .. + KH of each step
    let rg = lt % TR4;        // its rows: row0 + 4 rg .. + 4
    let tg = lt / TR4;        // its tokens: tok0 + 4 tg .. + 4
    // a<i>: token 4 tg + i, rows 4 rg .. + 4; b<i>: the same for the up rows (GLU)
    var a0 = vec4<f32>(0.0); var a1 = vec4<f32>(0.0); var a2 = vec4<f32>(0.0); var a3 = vec4<f32>(0.0);
    var b0 = vec4<f32>(0.0); var b1 = vec4<f32>(0.0); var b2 = vec4<f32>(0.0); var b3 = vec4<f32>(0.0);

    // the step's loads, held in registers until the previous step's products are done
    var w0 = fetch_w(row0, 0u, tid);
    var w1 = fetch_w(row0, 0u, tid + WG);
    var x0 = fetch_x(tok0, 0u, tid, n_tokens);
    var x1 = fetch_x(tok0, 0u, tid + WG, n_tokens);
    for (var k0 = 0u; k0 < K; k0 += KT) {
        workgroupBarrier();
        put_w(tid, w0);
        put_w(tid + WG, w1);
        put_x(tid, x0);
        put_x(tid + WG, x1);
        workgroupBarrier();
        if (k0 + KT < K) {
            w0 = fetch_w(row0, k0 + KT, tid);
            w1 = fetch_w(row0, k0 + KT, tid + WG);
            x0 = fetch_x(tok0, k0 + KT, tid, n_tokens);
            x1 = fetch_x(tok0, k0 + KT, tid + WG, n_tokens);
        }
        for (var k = kg * KH; k < kg * KH + KH; k += U) {
            let w = ws[k * TR4 + rg];
            let x = xs[k * TT4 + tg];
            a0 += w * x.x;
            a1 += w * x.y;
            a2 += w * x.z;
            a3 += w * x.w;
            if (GLU) {
                let u = ws[(KT + k) * TR4 + rg];
                b0 += u * x.x;
                b1 += u * x.y;
                b2 += u * x.z;
                b3 += u * x.w;
            }
            if (U == 2u) {
                let w_ = ws[(k + 1u) * TR4 + rg];
                let x_ = xs[(k + 1u) * TT4 + tg];
                a0 += w_ * x_.x;
                a1 += w_ * x_.y;
                a2 += w_ * x_.z;
                a3 += w_ * x_.w;
                if (GLU) {
                    let u_ = ws[(KT + k + 1u) * TR4 + rg];
                    b0 += u_ * x_.x;
                    b1 += u_ * x_.y;
                    b2 += u_ * x_.z;
                    b3 += u_ * x_.w;
                }
            }
        }
    }
    if (KS > 1u) {    // the K groups' sums, added into group 0 through workgroup memory
        a0 = group_sum(a0, kg, lt);
        a1 = group_sum(a1, kg, lt);
        a2 = group_sum(a2, kg, lt);
        a3 = group_sum(a3, kg, lt);
        if (GLU) {
            b0 = group_sum(b0, kg, lt);
            b1 = group_sum(b1, kg, lt);
            b2 = group_sum(b2, kg, lt);
            b3 = group_sum(b3, kg, lt);
        }
        if (kg > 0u) {
            return;
        }
    }
    let t0 = tok0 + tg * 4u;
    let n0 = row0 + rg * 4u;
    store(t0, n0, a0, b0);
    store(t0 + 1u, n0, a1, b1);
    store(t0 + 2u, n0, a2, b2);
    store(t0 + 3u, n0, a3, b3);
}
