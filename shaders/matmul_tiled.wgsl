// Tiled matrix-matrix product for prefill: the same result as matmul.wgsl (without LAST_ONLY), for many tokens:
//   Y[t, YOFF + n] (+)= sum_k W[n, k] * xin[t, k],  xin = X (NORM false) or rmsnorm(X[t]) * G (NORM true)
//   GLU: Y[t, YOFF + n] = silu(W[n, :] · xin[t]) * (W[N + n, :] · xin[t])
// Each workgroup computes a tile of 32 rows x 32 tokens. It walks K in steps of 32: the weights of the step are
// dequantized once into workgroup memory (the format's w8(row, oct) gives 8 at a time) and the inputs of the step
// loaded (normalised) beside them; each of the 256 threads then accumulates 2 rows x 2 tokens from workgroup memory.
// So each weight is read and dequantized once per 32 tokens instead of once per token.
//
// Constants: K (a multiple of 32 and of the format's block), N, NORM, EPS, ACCUM, GLU, YSTRIDE, YOFF.
// Bindings:
//   0 W: array<u32>              packed weights, N rows (2N with GLU)
//   1 X: array<vec4<f32>>        [n_tokens, K]
//   2 Y: array<f32>              [n_tokens, YSTRIDE]
//   3 step: uniform Step
//   4 G: array<vec4<f32>>        [K] the norm's gain (read only with NORM; bind any buffer otherwise)
// Dispatch: (ceil(N / 32), ceil(n_tokens_max / 32)) workgroups of 256 threads; token tiles past the pass's end
// return at once.
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;
@group(0) @binding(4) var<storage, read> G: array<vec4<f32>>;

const TR: u32 = 32u;          // rows per tile
const TT: u32 = 32u;          // tokens per tile
const KT: u32 = 32u;          // K per step
const K4: u32 = K / 4u;
const PAD: u32 = KT + 1u;     // row pitch in workgroup memory (odd: no bank conflicts)
const WG: u32 = 256u;         // threads
const SPLIT: u32 = WG / TT;   // threads sharing a token's sum of squares

var<workgroup> ws: array<f32, TR * PAD>;       // weights of the step, [row][k]
var<workgroup> us: array<f32, TR * PAD>;       // GLU: the up rows
var<workgroup> xs: array<f32, TT * PAD>;       // inputs of the step, [token][k]
var<workgroup> scale: array<f32, TT>;          // per-token 1/rms (1 without NORM)
var<workgroup> part_ss: array<f32, WG>;

// Dequantize weights [row0 + r][k0 .. k0 + KT] of the stacked matrix into dst (r < TR): 4 octets a row.
fn load_weights(row0: u32, k0: u32, tid: u32, up: bool) {
    for (var i = tid; i < TR * (KT / 8u); i += WG) {
        let r = i / (KT / 8u);
        let o = i % (KT / 8u);
        var w = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
        if (row0 + r < N) {
            w = w8(row0 + r + select(0u, N, up), k0 / 8u + o);
        }
        for (var j = 0u; j < 4u; j++) {
            if (up) {
                us[r * PAD + o * 8u + j] = w[0][j];
                us[r * PAD + o * 8u + 4u + j] = w[1][j];
            } else {
                ws[r * PAD + o * 8u + j] = w[0][j];
                ws[r * PAD + o * 8u + 4u + j] = w[1][j];
            }
        }
    }
}

@compute @workgroup_size(256)
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

    let rg = tid % 16u;       // this thread's rows: rg*2 .. +2
    let tg = tid / 16u;       // this thread's tokens: tg*2 .. +2
    var acc: array<vec2<f32>, 2>;      // acc[token i][row j]
    var acc2: array<vec2<f32>, 2>;
    for (var i = 0u; i < 2u; i++) { acc[i] = vec2<f32>(0.0); acc2[i] = vec2<f32>(0.0); }

    for (var k0 = 0u; k0 < K; k0 += KT) {
        workgroupBarrier();
        load_weights(row0, k0, tid, false);
        if (GLU) {
            load_weights(row0, k0, tid, true);
        }
        for (var i = tid; i < TT * (KT / 4u); i += WG) {     // inputs: one vec4 each
            let tt = i / (KT / 4u);
            let k4 = i % (KT / 4u);
            var v = vec4<f32>(0.0);
            if (tok0 + tt < n_tokens) {
                v = X[(tok0 + tt) * K4 + k0 / 4u + k4];
                if (NORM) {
                    v *= G[k0 / 4u + k4] * scale[tt];
                }
            }
            for (var j = 0u; j < 4u; j++) {
                xs[tt * PAD + k4 * 4u + j] = v[j];
            }
        }
        workgroupBarrier();
        for (var k = 0u; k < KT; k++) {
            let w = vec2<f32>(ws[(rg * 2u) * PAD + k], ws[(rg * 2u + 1u) * PAD + k]);
            var u = vec2<f32>(0.0);
            if (GLU) {
                u = vec2<f32>(us[(rg * 2u) * PAD + k], us[(rg * 2u + 1u) * PAD + k]);
            }
            for (var i = 0u; i < 2u; i++) {
                let x = xs[(tg * 2u + i) * PAD + k];
                acc[i] += w * x;
                if (GLU) {
                    acc2[i] += u * x;
                }
            }
        }
    }
    for (var i = 0u; i < 2u; i++) {
        let t = tok0 + tg * 2u + i;
        if (t >= n_tokens) {
            continue;
        }
        for (var j = 0u; j < 2u; j++) {
            let n = row0 + rg * 2u + j;
            if (n < N) {
                var v = acc[i][j];
                if (GLU) {
                    v = v / (1.0 + exp(-v)) * acc2[i][j];
                }
                let y = t * YSTRIDE + YOFF + n;
                if (ACCUM) {
                    Y[y] += v;
                } else {
                    Y[y] = v;
                }
            }
        }
    }
}
