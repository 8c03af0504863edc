// Prefill product on 8-bit activations with WGSL's packed int8 dot product:
//   Y[t, YOFF + n] (+)= sum_b ( dx[t, b] (d0[n, b] sum_{j<16} w[n, b, j] q[t, b, j] + d1[n, b] sum_{j>=16} ...)
//                               + m[n, b] s[t, b] )
//   GLU: Y[t, YOFF + n] = act(a) * u, a and u those sums for rows n and N + n (act: SiLU, or GELU-tanh with GELU)
// where weight j of 32-block b of a row is d_h w + m (h = j / 16: Q6_K has a scale per 16 weights, other formats
// d0 = d1; m: the offset of Q4_1 / Q4_K, else 0; w an int8) and the token's blocks of 32 are dx q with
// s = dx sum q (quantize_rows.wgsl, the RMSNorm fused there). The format file gives wblock(row, b): the block's int8
// words, (d0, d1) and m: formats_i8/*.wgsl for the file's layouts, formats_i8/*a.wgsl for the aligned layout.
// A workgroup computes TR rows (64 or 32) x 64 tokens with TR * 4 threads, each 4 rows x 4 tokens: per 32-block, per half block
// 4 vec4<i32> integer sums (rows in the lanes, one vec4 a token; 4 more for GLU's up rows), 128 dot4I8Packed (256
// with GLU) from 8 + 8 vec4 reads of workgroup memory, then f32 multiply-adds by the scales. K goes KB blocks a step:
// the step's weight words and activation words are staged in workgroup memory, word-major with 4 rows (4 tokens) a
// vec4. Everything a thread holds is a named vector: no private arrays (which NVIDIA's compiler can leave in local
// memory, docs/DESIGN.md).
//
// Constants: K (a multiple of 32; of 256 for k-quants), N, ACCUM, GLU, GELU, YSTRIDE, YOFF, TR, KB, and the format's
//   (WROWS, the rows of W, for the aligned layout); kernels.matmul_i8.
// Bindings:
//   0 W: array<WORD>        the packed weights, N rows (2N with GLU); WORD: the format's (u32, or vec4<u32>)
//   1 XQ: array<u32>        [n_tokens, K / 32, 10] blocks {dx: f32, s: f32, 8 words of 4 int8} (quantize_rows.wgsl)
//   2 Y: array<f32>         [n_tokens, YSTRIDE]
//   3 step: uniform Step
// Dispatch: (ceil(N / TR), ceil(n_tokens_max / 64), 1) workgroups of TR * 4 (kernels.matmul_i8_groups); token tiles past
// the pass's end return at once.
@group(0) @binding(0) var<storage, read> W: array<WORD>;
@group(0) @binding(1) var<storage, read> XQ: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;

const NB: u32 = K / 32u;                          // blocks a row
const HALVES: u32 = select(1u, 2u, GLU);
const R4: u32 = TR / 4u;                          // row vec4s of the tile: threads along the rows
const WG: u32 = R4 * 16u;                         // threads: R4 x 16 token vec4s
const W_ITEMS: u32 = HALVES * TR * KB;            // weight blocks a step
const X_ITEMS: u32 = 64u * KB;                    // activation blocks a step

// One 32-weight block of a row: weight 4w + i is byte i of q0[w] (w < 4) or q1[w - 4] (int8), times d.x (weights
// 0 .. 16) or d.y (16 .. 32), plus m.
struct WBlock {
    q0: vec4<u32>,
    q1: vec4<u32>,
    d: vec2<f32>,
    m: f32,
}

var<workgroup> ws: array<vec4<u32>, HALVES * KB * 8u * R4>;   // [half][block][word][rows / 4]
var<workgroup> wd: array<vec4<f32>, HALVES * KB * 2u * R4>;    // (d0, d1) [half][block][2][rows / 4]
var<workgroup> wm: array<vec4<f32>, HALVES * KB * R4>;         // m [half][block][rows / 4]
var<workgroup> xs: array<vec4<u32>, KB * 8u * 16u>;            // [block][word][tokens / 4]
var<workgroup> xd: array<vec4<f32>, KB * 16u>;                 // dx [block][tokens / 4]
var<workgroup> xm: array<vec4<f32>, KB * 16u>;                 // s

// Bytes v (each < 2 bias) minus bias, as two's complement bytes (bias 8, 16 or 32; formats whose integers are
// unsigned with an implied offset): v ^ bias is the value in log2(bias) + 1 bits; its sign bit is spread over the
// byte's high bits (times 256 / bias - 2, no carries).
fn sub_bias(v: vec4<u32>, bias: u32) -> vec4<u32> {
    let b4 = vec4<u32>(bias * 0x01010101u);
    let t = v ^ b4;
    return t | ((t & b4) * (256u / bias - 2u));
}

// Weight item i of the step at block b0 into workgroup memory: rows fastest, then blocks, then gate/up.
fn stage_w(row0: u32, b0: u32, i: u32) {
    let r = i % TR;
    let hb = i / TR;                               // half * KB + block of the step
    let n = row0 + r;
    let b = b0 + hb % KB;
    var w = WBlock(vec4<u32>(0u), vec4<u32>(0u), vec2<f32>(0.0), 0.0);
    if (n < N && b < NB) {
        w = wblock(n + (hb / KB) * N, b);
    }
    let c = r % 4u;
    let at = hb * 8u * R4 + r / 4u;                // word w of the block at at + R4 w
    ws[at][c] = w.q0.x;
    ws[at + R4][c] = w.q0.y;
    ws[at + 2u * R4][c] = w.q0.z;
    ws[at + 3u * R4][c] = w.q0.w;
    ws[at + 4u * R4][c] = w.q1.x;
    ws[at + 5u * R4][c] = w.q1.y;
    ws[at + 6u * R4][c] = w.q1.z;
    ws[at + 7u * R4][c] = w.q1.w;
    wd[hb * 2u * R4 + r / 4u][c] = w.d.x;
    wd[hb * 2u * R4 + R4 + r / 4u][c] = w.d.y;
    wm[hb * R4 + r / 4u][c] = w.m;
}

// Activation item i of the step at block b0: tokens fastest, then blocks.
fn stage_x(tok0: u32, b0: u32, i: u32, n_tokens: u32) {
    let t = i % 64u;
    let kb = i / 64u;
    let c = t % 4u;
    let at = kb * 128u + t / 4u;
    var o = 0u;
    let live = tok0 + t < n_tokens && b0 + kb < NB;
    if (live) {
        o = ((tok0 + t) * NB + b0 + kb) * 10u;
    }
    for (var w = 0u; w < 8u; w++) {
        xs[at + 16u * w][c] = select(0u, XQ[o + 2u + w], live);
    }
    xd[kb * 16u + t / 4u][c] = select(0.0, bitcast<f32>(XQ[o]), live);
    xm[kb * 16u + t / 4u][c] = select(0.0, bitcast<f32>(XQ[o + 1u]), live);
}

// The integer sums of one row vec4 (a: 4 rows' words) with one token vec4 (x: 4 tokens' words), token by token.
fn dots(a: vec4<u32>, x: u32) -> vec4<i32> {
    return vec4<i32>(dot4I8Packed(a.x, x), dot4I8Packed(a.y, x), dot4I8Packed(a.z, x), dot4I8Packed(a.w, x));
}

fn store(t: u32, n: u32, a: vec4<f32>, u: vec4<f32>, n_tokens: u32) {
    if (t >= n_tokens) {
        return;
    }
    for (var c = 0u; c < 4u; c++) {
        if (n + c < N) {
            var v = a[c];
            if (GLU) {
                v = gate_act(v) * u[c];
            }
            let y = t * YSTRIDE + YOFF + n + c;
            if (ACCUM) {
                Y[y] += v;
            } else {
                Y[y] = v;
            }
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let n_tokens = step.n_tokens;
    let row0 = wid.x * TR;
    let tok0 = wid.y * 64u;
    if (tok0 >= n_tokens) {
        return;
    }
    let rg = tid % R4;           // rows 4 rg .. 4 rg + 4 of the tile
    let tg = tid / R4;           // tokens 4 tg .. 4 tg + 4
    var a0 = vec4<f32>(0.0); var a1 = vec4<f32>(0.0); var a2 = vec4<f32>(0.0); var a3 = vec4<f32>(0.0);
    var u0 = vec4<f32>(0.0); var u1 = vec4<f32>(0.0); var u2 = vec4<f32>(0.0); var u3 = vec4<f32>(0.0);
    for (var b0 = 0u; b0 < NB; b0 += KB) {
        for (var i = tid; i < W_ITEMS; i += WG) { stage_w(row0, b0, i); }
        for (var i = tid; i < X_ITEMS; i += WG) { stage_x(tok0, b0, i, n_tokens); }
        workgroupBarrier();
        for (var kb = 0u; kb < KB; kb++) {
            let dx = xd[kb * 16u + tg];
            let sx = xm[kb * 16u + tg];
            for (var h = 0u; h < 2u; h++) {            // half blocks: words 4h .. 4h + 4, scale d_h
                var s0 = vec4<i32>(0); var s1 = vec4<i32>(0); var s2 = vec4<i32>(0); var s3 = vec4<i32>(0);
                var v0 = vec4<i32>(0); var v1 = vec4<i32>(0); var v2 = vec4<i32>(0); var v3 = vec4<i32>(0);
                for (var w = 4u * h; w < 4u * h + 4u; w++) {
                    let x = xs[kb * 128u + 16u * w + tg];
                    let a = ws[(kb * 8u + w) * R4 + rg];
                    s0 += dots(a, x.x); s1 += dots(a, x.y); s2 += dots(a, x.z); s3 += dots(a, x.w);
                    if (GLU) {
                        let u = ws[((KB + kb) * 8u + w) * R4 + rg];
                        v0 += dots(u, x.x); v1 += dots(u, x.y); v2 += dots(u, x.z); v3 += dots(u, x.w);
                    }
                }
                let d = wd[(kb * 2u + h) * R4 + rg];           // 4 rows' scales of this half
                a0 += vec4<f32>(s0) * d * dx.x;
                a1 += vec4<f32>(s1) * d * dx.y;
                a2 += vec4<f32>(s2) * d * dx.z;
                a3 += vec4<f32>(s3) * d * dx.w;
                if (GLU) {
                    let du = wd[((KB + kb) * 2u + h) * R4 + rg];
                    u0 += vec4<f32>(v0) * du * dx.x;
                    u1 += vec4<f32>(v1) * du * dx.y;
                    u2 += vec4<f32>(v2) * du * dx.z;
                    u3 += vec4<f32>(v3) * du * dx.w;
                }
            }
            let m = wm[kb * R4 + rg];
            a0 += m * sx.x; a1 += m * sx.y; a2 += m * sx.z; a3 += m * sx.w;
            if (GLU) {
                let mu = wm[(KB + kb) * R4 + rg];
                u0 += mu * sx.x; u1 += mu * sx.y; u2 += mu * sx.z; u3 += mu * sx.w;
            }
        }
        workgroupBarrier();
    }
    let n = row0 + 4u * rg;
    let t = tok0 + 4u * tg;
    store(t, n, a0, u0, n_tokens);
    store(t + 1u, n, a1, u1, n_tokens);
    store(t + 2u, n, a2, u2, n_tokens);
    store(t + 3u, n, a3, u3, n_tokens);
}
