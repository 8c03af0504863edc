// Tiled matrix-matrix product for prefill with 8 x 8 outputs a thread: the same result as matmul_tiled.wgsl,
//   Y[t, YOFF + n] (+)= sum_k W[n, k] * xin[t, k],  xin = X (NORM false) or rmsnorm(X[t]) * G (NORM true)
//   GLU: Y[t, YOFF + n] = act(W[n, :] · xin[t]) * (W[N + n, :] · xin[t])   (act: SiLU, or GELU-tanh with GELU)
// for products with enough rows and tokens to fill the GPU with larger tiles. A workgroup owns TR tile rows x TT
// tokens with TR * TT / 64 threads; each thread holds two vec4s of rows (tile rows 4 rg .. + 4 and TR / 2 + 4 rg ..
// + 4) times two vec4s of tokens (4 tg .. + 4 and TT / 2 + 4 tg .. + 4): 16 vec4 accumulators, so each k costs it
// four vec4 reads of workgroup memory for 64 FMAs (matmul_tiled's 4 x 4: two for 16). With GLU the tile's second
// half of rows are the up rows of its first half's gate rows, so each thread holds both factors of its outputs and
// a tile writes TR / 2 output rows. K is walked in steps of KT: the step's weights are dequantized once into
// workgroup memory (the format's w8(row, oct)) and its inputs loaded (normalised) beside them, k-major as vec4s of
// 4 rows / 4 tokens; the next step's are fetched into registers while the current one is multiplied.
//
// Constants: K (a multiple of KT and of the format's block), N, NORM, EPS, ACCUM, GLU, GELU, YSTRIDE, YOFF,
//   TR, TT (tile rows, counting the up rows with GLU, and tokens: 64 or 128), KT (K per step, such that each thread
//   fetches at most 2 items of weights and 2 of inputs a step); kernels.matmul_tiled8.
// Bindings:
//   0 W: array<u32>              packed weights, N rows (2N with GLU)
//   1 X: array<vec4<f32>>        [n_tokens, K]
//   2 Y: array<f32>              [n_tokens, YSTRIDE]
//   3 step: uniform Step
//   4 G: array<vec4<f32>>        [K] the norm's gain (read only with NORM; bind any buffer otherwise)
// Dispatch: (ceil(N / (TR / (2 with GLU, else 1))), ceil(n_tokens_max / TT)) workgroups of TR * TT / 64 threads
// (kernels.tiled8_groups); token tiles past the pass's end return at once.
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;
@group(0) @binding(4) var<storage, read> G: array<vec4<f32>>;

const K4: u32 = K / 4u;
const TR4: u32 = TR / 4u;                        // vec4s of tile rows a k
const TT4: u32 = TT / 4u;                        // vec4s of tokens a k
const HR: u32 = TR / 8u;                         // threads along the rows (each two vec4s, HR apart)
const HT: u32 = TT / 8u;                         // threads along the tokens (each two vec4s, HT apart)
const WG: u32 = HR * HT;                         // threads
const OUT_ROWS: u32 = select(TR, TR / 2u, GLU);  // output rows a tile
const W_ITEMS: u32 = TR * (KT / 8u);             // w8 calls a step
const X_ITEMS: u32 = TT * (KT / 4u);             // vec4 input reads a step
const SPLIT: u32 = WG / TT;                      // threads sharing a token's sum of squares

var<workgroup> ws: array<vec4<f32>, KT * TR4>;   // weights of the step, [k][tile row / 4]
var<workgroup> xs: array<vec4<f32>, KT * TT4>;   // inputs of the step, [k][token / 4]
var<workgroup> scale: array<f32, TT>;            // per-token 1/rms (1 without NORM)
var<workgroup> part_ss: array<f32, WG>;

// Weight item i of the step at k0 (tile rows fastest, then octets): 8 weights of tile row r, whose weight row is
// out0 + r, or with GLU out0 + r for the gate half and N + out0 + r - TR / 2 for the up half.
fn fetch_w(out0: u32, k0: u32, i: u32) -> array<vec4<f32>, 2> {
    let r = i % TR;
    let o = i / TR;
    let n = out0 + r % OUT_ROWS;
    if (i >= W_ITEMS || n >= N) {
        return array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    }
    return w8(select(n, n + N, GLU && r >= OUT_ROWS), k0 / 8u + o);
}

fn put_w(i: u32, w: array<vec4<f32>, 2>) {
    if (i >= W_ITEMS) {
        return;
    }
    let r = i % TR;
    let base = (i / TR) * 8u * TR4 + r / 4u;
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
    let base = (i / TT) * 4u * TT4 + tt / 4u;
    let c = tt % 4u;
    let s = v * scale[tt];
    xs[base][c] = s.x;
    xs[base + TT4][c] = s.y;
    xs[base + 2u * TT4][c] = s.z;
    xs[base + 3u * TT4][c] = s.w;
}

fn store1(t: u32, n: u32, v: f32) {
    if (n < N) {
        let y = t * YSTRIDE + YOFF + n;
        if (ACCUM) {
            Y[y] += v;
        } else {
            Y[y] = v;
        }
    }
}

// Outputs of token t for rows n0 .. n0 + 4 (with GLU: act(gate) * up).
fn store(t: u32, n0: u32, acc: vec4<f32>, up: vec4<f32>) {
    if (t < step.n_tokens) {
        var v = acc;
        if (GLU) {
            v = vec4<f32>(gate_act(acc.x), gate_act(acc.y), gate_act(acc.z), gate_act(acc.w)) * up;
        }
        store1(t, n0, v.x);
        store1(t, n0 + 1u, v.y);
        store1(t, n0 + 2u, v.z);
        store1(t, n0 + 3u, v.w);
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let out0 = wid.x * OUT_ROWS;
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

    let rg = tid % HR;        // rows: vec4s rg and HR + rg of the tile
    let tg = tid / HR;        // tokens: vec4s tg and HT + tg
    // a<r><c>: row vec4 r (0: rg, 1: HR + rg) times token c (0..3 of vec4 tg, 4..7 of vec4 HT + tg)
    var a00 = vec4<f32>(0.0); var a01 = vec4<f32>(0.0); var a02 = vec4<f32>(0.0); var a03 = vec4<f32>(0.0);
    var a04 = vec4<f32>(0.0); var a05 = vec4<f32>(0.0); var a06 = vec4<f32>(0.0); var a07 = vec4<f32>(0.0);
    var a10 = vec4<f32>(0.0); var a11 = vec4<f32>(0.0); var a12 = vec4<f32>(0.0); var a13 = vec4<f32>(0.0);
    var a14 = vec4<f32>(0.0); var a15 = vec4<f32>(0.0); var a16 = vec4<f32>(0.0); var a17 = vec4<f32>(0.0);

    var w0 = fetch_w(out0, 0u, tid);
    var w1 = fetch_w(out0, 0u, tid + WG);
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
            w0 = fetch_w(out0, k0 + KT, tid);
            w1 = fetch_w(out0, k0 + KT, tid + WG);
            x0 = fetch_x(tok0, k0 + KT, tid, n_tokens);
            x1 = fetch_x(tok0, k0 + KT, tid + WG, n_tokens);
        }
        for (var k = 0u; k < KT; k++) {
            let p = ws[k * TR4 + rg];
            let q = ws[k * TR4 + HR + rg];
            let u = xs[k * TT4 + tg];
            let v = xs[k * TT4 + HT + tg];
            a00 += p * u.x; a01 += p * u.y; a02 += p * u.z; a03 += p * u.w;
            a04 += p * v.x; a05 += p * v.y; a06 += p * v.z; a07 += p * v.w;
            a10 += q * u.x; a11 += q * u.y; a12 += q * u.z; a13 += q * u.w;
            a14 += q * v.x; a15 += q * v.y; a16 += q * v.z; a17 += q * v.w;
        }
    }
    let t0 = tok0 + 4u * tg;
    let t1 = tok0 + TT / 2u + 4u * tg;
    let n0 = out0 + 4u * rg;
    if (GLU) {            // row vec4 1 holds the up rows of row vec4 0's outputs
        store(t0, n0, a00, a10); store(t0 + 1u, n0, a01, a11); store(t0 + 2u, n0, a02, a12); store(t0 + 3u, n0, a03, a13);
        store(t1, n0, a04, a14); store(t1 + 1u, n0, a05, a15); store(t1 + 2u, n0, a06, a16); store(t1 + 3u, n0, a07, a17);
    } else {
        let n1 = out0 + TR / 2u + 4u * rg;
        let z = vec4<f32>(0.0);
        store(t0, n0, a00, z); store(t0 + 1u, n0, a01, z); store(t0 + 2u, n0, a02, z); store(t0 + 3u, n0, a03, z);
        store(t1, n0, a04, z); store(t1 + 1u, n0, a05, z); store(t1 + 2u, n0, a06, z); store(t1 + 3u, n0, a07, z);
        store(t0, n1, a10, z); store(t0 + 1u, n1, a11, z); store(t0 + 2u, n1, a12, z); store(t0 + 3u, n1, a13, z);
        store(t1, n1, a14, z); store(t1 + 1u, n1, a15, z); store(t1 + 2u, n1, a16, z); store(t1 + 3u, n1, a17, z);
    }
}
