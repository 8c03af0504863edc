// Matrix-matrix product for prefill on subgroup matrices (tensor cores: Chromium's chromium-experimental-subgroup-
// matrix, where the adapter offers an f16 x f16 -> f32 configuration SM x SN x SK). The result of matmul_tiled.wgsl
// with the inputs and the dequantized weights rounded to f16 (clamped to its range) and f32 sums:
//   Y[t, YOFF + n] (+)= sum_k W[n, k] * xin[t, k],  xin = X (NORM false) or rmsnorm(X[t]) * G (NORM true)
//   GLU: Y[t, YOFF + n] = act(W[n, :] · xin[t]) * (W[N + n, :] · xin[t])   (act: SiLU, or GELU-tanh with GELU)
// Each workgroup computes a tile of TT tokens x TR rows with GT x GR subgroups of SGSIZE threads; each subgroup a block
// of 2 x 2 result matrices (2 SM tokens x 2 SN rows; GLU: 2 x 2 more for the up rows), i.e. TT = 2 GT SM and
// TR = 2 GR SN. It walks K in steps of KS: the step's weights are dequantized once (the format's w8(row, oct)) into
// workgroup memory as f16 rows of KS values (stride KP = KS + 8, so that neighbouring rows start in other banks), the
// step's inputs (normalised) beside them as f16 token rows; then each subgroup loads, for every SK of the step, its
// 2 left matrices (tokens x k, row-major) and 2 (4) right matrices (k x rows: the weight rows read column-major) and
// multiply-accumulates. The next step's loads are held in registers while the current step is multiplied. At the
// end the accumulators pass through workgroup memory (OUT: TT x TR f32) so that the threads write whole rows of Y.
//
// Constants: K (a multiple of KS and of the format's block), N, NORM, EPS, ACCUM, GLU, GELU, YSTRIDE, YOFF, SM, SN,
//   SK (the subgroup matrix configuration), SGSIZE (threads a subgroup: the adapter's only subgroup size), GT, GR, KS,
//   W_PER / X_PER / O_PER (weight octets / input vec4s a thread loads a step, outputs it writes), EMULATE;
//   kernels.matmul_sgmat. A template (kernels.build renders the //% lines with jinja2): a thread's loads and outputs
//   are separate variables. EMULATE (tests: adapters without subgroup matrices) swaps the subgroup matrix built-ins
//   for plain WGSL in which every invocation holds whole matrices, H = f32; the rest of the kernel is the same text.
// Bindings (as matmul_tiled.wgsl):
//   0 W: array<u32>              packed weights, N rows (2N with GLU)
//   1 X: array<vec4<f32>>        [n_tokens, K]
//   2 Y: array<f32>              [n_tokens, YSTRIDE]
//   3 step: uniform Step
//   4 G: array<vec4<f32>>        [K] the norm's gain (read only with NORM; bind any buffer otherwise)
// Dispatch: (ceil(N / TR), ceil(n_tokens_max / TT)) workgroups of GT * GR * SGSIZE threads (kernels.sgmat_groups); token
// tiles past the pass's end return at once.
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;
@group(0) @binding(4) var<storage, read> G: array<vec4<f32>>;

//% set MMA = "mma" if EMULATE else "subgroupMatrixMultiplyAccumulate"
//% if EMULATE
alias H = f32;
//% else
alias H = f16;
//% endif
const K4: u32 = K / 4u;
const WG: u32 = GT * GR * SGSIZE;                // threads
const TT: u32 = 2u * GT * SM;                    // tokens of the tile
const TR: u32 = 2u * GR * SN;                    // rows of the tile
const KP: u32 = KS + 8u;                         // stride of a token's / row's values in xs / ws
const HALVES: u32 = select(1u, 2u, GLU);         // gate (and up) rows
const SPLIT: u32 = WG / TT;                      // threads sharing a token's sum of squares
const H_MAX: f32 = 65504.0;                      // f16's largest finite value

var<workgroup> xs: array<H, TT * KP>;            // inputs of the step, [token][k]
var<workgroup> ws: array<H, HALVES * TR * KP>;   // weights of the step, [half][row][k]
var<workgroup> outs: array<f32, TT * TR>;        // the tile's sums, [token][row]
var<workgroup> scale: array<f32, TT>;            // per-token 1/rms (1 without NORM)
var<workgroup> part_ss: array<f32, WG>;

fn half4(v: vec4<f32>) -> vec4<H> {
    return vec4<H>(clamp(v, vec4<f32>(-H_MAX), vec4<f32>(H_MAX)));
}

// Weight item i of the step at k0: octets fastest (a row's neighbouring words), then rows, then gate/up.
fn fetch_w(row0: u32, k0: u32, i: u32) -> array<vec4<f32>, 2> {
    let o = i % (KS / 8u);
    let r = (i / (KS / 8u)) % TR;
    let h = i / (TR * (KS / 8u));
    if (row0 + r >= N) {
        return array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    }
    return w8(row0 + r + h * N, k0 / 8u + o);
}

fn put_w(i: u32, w: array<vec4<f32>, 2>) {
    let o = i % (KS / 8u);
    let r = (i / (KS / 8u)) % TR;
    let h = i / (TR * (KS / 8u));
    let base = (h * TR + r) * KP + o * 8u;
    let a = half4(w[0]);
    let b = half4(w[1]);
    ws[base] = a.x;
    ws[base + 1u] = a.y;
    ws[base + 2u] = a.z;
    ws[base + 3u] = a.w;
    ws[base + 4u] = b.x;
    ws[base + 5u] = b.y;
    ws[base + 6u] = b.z;
    ws[base + 7u] = b.w;
}

// Input item i of the step at k0: vec4s of k fastest, then tokens. Returns X * G (the gain, with NORM).
fn fetch_x(tok0: u32, k0: u32, i: u32, n_tokens: u32) -> vec4<f32> {
    let k4 = i % (KS / 4u);
    let t = i / (KS / 4u);
    if (tok0 + t >= n_tokens) {
        return vec4<f32>(0.0);
    }
    var v = X[(tok0 + t) * K4 + k0 / 4u + k4];
    if (NORM) {
        v *= G[k0 / 4u + k4];
    }
    return v;
}

fn put_x(i: u32, v: vec4<f32>) {
    let k4 = i % (KS / 4u);
    let t = i / (KS / 4u);
    let base = t * KP + k4 * 4u;
    let s = half4(v * scale[t]);
    xs[base] = s.x;
    xs[base + 1u] = s.y;
    xs[base + 2u] = s.z;
    xs[base + 3u] = s.w;
}

// The subgroup matrices: left (SM tokens x SK k, row-major in xs), right (SK k x SN rows: the weight rows of ws read
// column-major), result (SM tokens x SN rows, f32), multiply-accumulate MMA, and the store of a result into outs.
//% if EMULATE
// (emulated: a left / right matrix is its offset in xs / ws, read by mma; each lane of a "subgroup" computes and
// stores its share of a result's elements, e = lane, lane + SGSIZE, ..., element e being token e / SN, row e % SN)
alias Result = array<f32, SM * SN>;
var<private> lane: u32;

fn left(t: u32, k: u32) -> u32 {
    return t * KP + k;
}

fn right(r: u32, k: u32) -> u32 {
    return r * KP + k;
}

fn mma(a: u32, b: u32, c: Result) -> Result {
    var d = c;
    for (var e = lane; e < SM * SN; e += SGSIZE) {
        for (var j = 0u; j < SK; j++) { d[e] += f32(xs[a + (e / SN) * KP + j]) * f32(ws[b + (e % SN) * KP + j]); }
    }
    return d;
}

fn put_out(t: u32, r: u32, c: Result) {
    for (var e = lane; e < SM * SN; e += SGSIZE) { outs[(t + e / SN) * TR + r + e % SN] = c[e]; }
}
//% else
alias Result = subgroup_matrix_result<f32, SN, SM>;

fn left(t: u32, k: u32) -> subgroup_matrix_left<f16, SK, SM> {
    return subgroupMatrixLoad<subgroup_matrix_left<f16, SK, SM>>(&xs, t * KP + k, false, KP);
}

fn right(r: u32, k: u32) -> subgroup_matrix_right<f16, SN, SK> {
    return subgroupMatrixLoad<subgroup_matrix_right<f16, SN, SK>>(&ws, r * KP + k, true, KP);
}
//% endif

@compute @workgroup_size(WG)
//% if EMULATE
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let sid = tid / SGSIZE;
    lane = tid % SGSIZE;
//% else
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32,
        @builtin(subgroup_id) sid: u32) {
//% endif
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

    let tb = (sid / GR) * 2u * SM;    // this subgroup's first token in the tile
    let rb = (sid % GR) * 2u * SN;    // and first row
    // c<i><j>: tokens tb + i SM .., rows rb + j SN ..; u<i><j>: the same for the up rows (GLU)
//% for v in (["c", "u"] if GLU else ["c"])
    var {{ v }}00 = Result();
    var {{ v }}01 = Result();
    var {{ v }}10 = Result();
    var {{ v }}11 = Result();
//% endfor

    // the step's loads, held in registers until the previous step's products are done
//% for i in range(W_PER)
    var w{{ i }} = fetch_w(row0, 0u, tid + {{ i }}u * WG);
//% endfor
//% for i in range(X_PER)
    var x{{ i }} = fetch_x(tok0, 0u, tid + {{ i }}u * WG, n_tokens);
//% endfor
    for (var k0 = 0u; k0 < K; k0 += KS) {
        workgroupBarrier();
//% for i in range(W_PER)
        put_w(tid + {{ i }}u * WG, w{{ i }});
//% endfor
//% for i in range(X_PER)
        put_x(tid + {{ i }}u * WG, x{{ i }});
//% endfor
        workgroupBarrier();
        if (k0 + KS < K) {
//% for i in range(W_PER)
            w{{ i }} = fetch_w(row0, k0 + KS, tid + {{ i }}u * WG);
//% endfor
//% for i in range(X_PER)
            x{{ i }} = fetch_x(tok0, k0 + KS, tid + {{ i }}u * WG, n_tokens);
//% endfor
        }
        for (var k = 0u; k < KS; k += SK) {
            let a0 = left(tb, k);
            let a1 = left(tb + SM, k);
            let b0 = right(rb, k);
            let b1 = right(rb + SN, k);
            c00 = {{ MMA }}(a0, b0, c00);
            c01 = {{ MMA }}(a0, b1, c01);
            c10 = {{ MMA }}(a1, b0, c10);
            c11 = {{ MMA }}(a1, b1, c11);
//% if GLU
            let v0 = right(TR + rb, k);
            let v1 = right(TR + rb + SN, k);
            u00 = {{ MMA }}(a0, v0, u00);
            u01 = {{ MMA }}(a0, v1, u01);
            u10 = {{ MMA }}(a1, v0, u10);
            u11 = {{ MMA }}(a1, v1, u11);
//% endif
        }
    }

    // the gate (or plain) sums, then with GLU the up sums, through outs; each thread writes O_PER outputs of the tile
//% for v in (["c", "u"] if GLU else ["c"])
//% if v == "u"
//% for i in range(O_PER)
    let g{{ i }} = outs[tid + {{ i }}u * WG];
//% endfor
    workgroupBarrier();
//% endif
//% for t, r in (("tb", "rb"), ("tb", "rb + SN"), ("tb + SM", "rb"), ("tb + SM", "rb + SN"))
//% set m = v ~ ("1" if "SM" in t else "0") ~ ("1" if "SN" in r else "0")
//% if EMULATE
    put_out({{ t }}, {{ r }}, {{ m }});
//% else
    subgroupMatrixStore(&outs, ({{ t }}) * TR + {{ r }}, {{ m }}, false, TR);
//% endif
//% endfor
    workgroupBarrier();
//% endfor
//% for i in range(O_PER)
    put_y(tok0, row0, tid + {{ i }}u * WG, n_tokens, {{ ("g%d" % i) if GLU else "0.0" }});
//% endfor
}

// Output o of the tile (token o / TR, row o % TR) into Y: the sum in outs, with GLU act(gate) times it.
fn put_y(tok0: u32, row0: u32, o: u32, n_tokens: u32, gate: f32) {
    let t = tok0 + o / TR;
    let n = row0 + o % TR;
    if (t < n_tokens && n < N) {
        var v = outs[o];
        if (GLU) {
            v = gate_act(gate) * v;
        }
        let y = t * YSTRIDE + YOFF + n;
        if (ACCUM) {
            Y[y] += v;
        } else {
            Y[y] = v;
        }
    }
}
