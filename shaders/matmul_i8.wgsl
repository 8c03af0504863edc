// Prefill product on 8-bit activations with WGSL's packed int8 dot product:
//   Y[t, YOFF + n] (+)= sum_b ( dx[t, b] (d0[n, b] sum_{j<16} w[n, b, j] q[t, b, j] + d1[n, b] sum_{j>=16} ...)
//                               + m[n, b] s[t, b] )
//   GLU: Y[t, YOFF + n] = act(a) * u, a and u those sums for rows n and N + n (act: SiLU, or GELU-tanh with GELU)
// where weight j of 32-block b of a row is d_h w + m (h = j / 16: Q6_K has a scale per 16 weights, other formats
// d0 = d1; m: the offset of Q4_1 / Q4_K, else 0; w an int8) and the token's blocks of 32 are dx q with
// s = dx sum q (quantize_rows.wgsl, the RMSNorm fused there). The format file gives wblock(row, b): the block's int8
// words, (d0, d1) and m, and the constants SCALES and OFFSET: formats_matmul_i8/*.wgsl for the file's layouts,
// formats_matmul_i8/*a.wgsl for the aligned layout.
// A workgroup computes TR rows (64 or 32) x 64 tokens with TR * 4 threads, each 4 rows x 4 tokens: per 32-block
// 4 vec4<i32> integer sums (rows in the lanes, one vec4 a token; 4 more for GLU's up rows), 128 dot4I8Packed (256
// with GLU) from 8 + 8 vec4 reads of workgroup memory (8 more with GLU or PAIR). PAIR (plain products): tiles of
// 2 TR rows, a thread taking rows 4 rg .. 4 rg + 4 and TR + 4 rg .. as GLU takes gate and up rows, so each vec4 of
// activations read from workgroup memory feeds 8 rows instead of 4. Then f32 multiply-adds by the scales: once a
// block, or once a half block for formats with a scale per 16 weights (the format's SCALES = 2: Q6_K); the offset
// term only for formats that have one (OFFSET). K goes KB blocks a step: the step's weight words and activation
// words are staged in workgroup memory, word-major with 4 rows (4 tokens) a vec4, a thread staging at most one weight
// block and one activation block (so HALVES KB <= 4 and 64 KB <= 4 TR), read from global memory during the previous
// step's products. K groups (KG > 1, for products with few tiles: more threads to hide latencies): KG groups of
// TR * 4 threads share the tile, group g taking K steps g, g + KG, ... with its own staging; their sums meet in
// workgroup memory at the end. Everything a thread holds is a named vector: no private arrays (which NVIDIA's
// compiler can leave in local memory, docs/DESIGN.md).
//
// Constants: K (a multiple of 32; of 256 for k-quants), N, ACCUM, GLU, GELU, PAIR, YSTRIDE, YOFF, TR, KB, KG, KS,
//   TMAX and the format's (WROWS, the rows of W, for the aligned layout); kernels.matmul_i8.
// K parts (KS > 1, no GLU, for long products with fewer tiles than the GPU has cores: SmolLM2's down projection):
// workgroup z takes blocks [z NBS, (z + 1) NBS) of every row and writes its sums as part z of Y,
// [KS, TMAX, YSTRIDE]; sum_parts.wgsl adds the parts into the output.
// Bindings:
//   0 W: array<WORD>        the packed weights, N rows (2N with GLU); WORD: the format's (u32, or vec4<u32>)
//   1 XQ: array<u32>        [n_tokens, K / 32, 10] blocks {dx: f32, s: f32, 8 words of 4 int8} (quantize_rows.wgsl)
//   2 Y: array<f32>         [n_tokens, YSTRIDE]; with KS > 1 the parts [KS, TMAX, YSTRIDE]
//   3 step: uniform Step
// Dispatch: (ceil(N / TILE), ceil(n_tokens_max / 64), KS) workgroups of TR * 4 * KG, TILE = TR or 2 TR with PAIR
// (kernels.matmul_i8_groups); token tiles past the pass's end return at once.
@group(0) @binding(0) var<storage, read> W: array<WORD>;
@group(0) @binding(1) var<storage, read> XQ: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;

const NB: u32 = K / 32u;                          // blocks a row
const NBS: u32 = (NB + KS - 1u) / KS;             // blocks a K part
const TWO: bool = GLU || PAIR;                   // a second set of rows a thread: GLU's up rows, or PAIR's
const HALVES: u32 = select(1u, 2u, TWO);
const TILE: u32 = select(TR, 2u * TR, PAIR);      // rows of the workgroup's tile
const R4: u32 = TR / 4u;                          // row vec4s of the tile: threads along the rows
const LT: u32 = R4 * 16u;                         // threads of a K group: R4 x 16 token vec4s
const WG: u32 = LT * KG;                          // threads: KG groups
const W_ITEMS: u32 = HALVES * TR * KB;            // weight blocks a step
const X_ITEMS: u32 = 64u * KB;                    // activation blocks a step
const SW: u32 = 8u / SCALES;                      // words a scale covers (the format's SCALES: 1 or 2 a block)

// One 32-weight block of a row: weight 4w + i is byte i of q0[w] (w < 4) or q1[w - 4] (int8), times d.x (weights
// 0 .. 16) or d.y (16 .. 32), plus m.
struct WBlock {
    q0: vec4<u32>,
    q1: vec4<u32>,
    d: vec2<f32>,
    m: f32,
}

// Each K group's staging: group g's at g * WS_G, g * WD_G, ... of each array.
const WS_G: u32 = HALVES * KB * 8u * R4;
const WD_G: u32 = HALVES * KB * 2u * R4;
const WM_G: u32 = HALVES * KB * R4;
const XS_G: u32 = KB * 8u * 16u;
const XD_G: u32 = KB * 16u;
var<workgroup> ws: array<vec4<u32>, KG * WS_G>;    // [group][half][block][word][rows / 4]
var<workgroup> wd: array<vec4<f32>, KG * WD_G>;    // (d0, d1) [group][half][block][2][rows / 4]
var<workgroup> wm: array<vec4<f32>, KG * WM_G>;    // m [group][half][block][rows / 4]
var<workgroup> xs: array<vec4<u32>, KG * XS_G>;    // [group][block][word][tokens / 4]
var<workgroup> xd: array<vec4<f32>, KG * XD_G>;    // dx [group][block][tokens / 4]
var<workgroup> xm: array<vec4<f32>, KG * XD_G>;    // s

// Bytes v (each < 2 bias) minus bias, as two's complement bytes (bias 8, 16 or 32; formats whose integers are
// unsigned with an implied offset): v ^ bias is the value in log2(bias) + 1 bits; its sign bit is spread over the
// byte's high bits (times 256 / bias - 2, no carries).
fn sub_bias(v: vec4<u32>, bias: u32) -> vec4<u32> {
    let b4 = vec4<u32>(bias * 0x01010101u);
    let t = v ^ b4;
    return t | ((t & b4) * (256u / bias - 2u));
}

// Weight item i of the step at block b0 (rows fastest, then blocks, then gate/up or PAIR's two row sets;
// i < W_ITEMS), zeros past the ends (blocks from bend on: the K part's end).
fn load_w(row0: u32, b0: u32, i: u32, bend: u32) -> WBlock {
    let hb = i / TR;                               // half * KB + block of the step
    let half = hb / KB;
    let n = row0 + i % TR + select(0u, half * TR, PAIR);
    let b = b0 + hb % KB;
    if (i >= W_ITEMS || n >= N || b >= bend) {
        return WBlock(vec4<u32>(0u), vec4<u32>(0u), vec2<f32>(0.0), 0.0);
    }
    return wblock(select(n, n + half * N, GLU), b);
}

fn put_w(g: u32, i: u32, w: WBlock) {
    let r = i % TR;
    let hb = i / TR;
    let c = r % 4u;
    let at = g * WS_G + hb * 8u * R4 + r / 4u;     // word w of the block at at + R4 w
    ws[at][c] = w.q0.x;
    ws[at + R4][c] = w.q0.y;
    ws[at + 2u * R4][c] = w.q0.z;
    ws[at + 3u * R4][c] = w.q0.w;
    ws[at + 4u * R4][c] = w.q1.x;
    ws[at + 5u * R4][c] = w.q1.y;
    ws[at + 6u * R4][c] = w.q1.z;
    ws[at + 7u * R4][c] = w.q1.w;
    wd[g * WD_G + hb * 2u * R4 + r / 4u][c] = w.d.x;
    wd[g * WD_G + hb * 2u * R4 + R4 + r / 4u][c] = w.d.y;
    wm[g * WM_G + hb * R4 + r / 4u][c] = w.m;
}

// Activation item i of the step at block b0 (tokens fastest, then blocks; i < X_ITEMS): its 8 words and (dx, s),
// zeros past the ends.
struct XBlock {
    q0: vec4<u32>,
    q1: vec4<u32>,
    ds: vec2<f32>,
}

fn load_x(tok0: u32, b0: u32, i: u32, n_tokens: u32, bend: u32) -> XBlock {
    let t = tok0 + i % 64u;
    let b = b0 + i / 64u;
    if (i >= X_ITEMS || t >= n_tokens || b >= bend) {
        return XBlock(vec4<u32>(0u), vec4<u32>(0u), vec2<f32>(0.0));
    }
    let o = (t * NB + b) * 10u;
    return XBlock(vec4<u32>(XQ[o + 2u], XQ[o + 3u], XQ[o + 4u], XQ[o + 5u]),
                  vec4<u32>(XQ[o + 6u], XQ[o + 7u], XQ[o + 8u], XQ[o + 9u]),
                  vec2<f32>(bitcast<f32>(XQ[o]), bitcast<f32>(XQ[o + 1u])));
}

fn put_x(g: u32, i: u32, x: XBlock) {
    let t = i % 64u;
    let kb = i / 64u;
    let c = t % 4u;
    let at = g * XS_G + kb * 128u + t / 4u;        // word w at at + 16 w
    xs[at][c] = x.q0.x;
    xs[at + 16u][c] = x.q0.y;
    xs[at + 32u][c] = x.q0.z;
    xs[at + 48u][c] = x.q0.w;
    xs[at + 64u][c] = x.q1.x;
    xs[at + 80u][c] = x.q1.y;
    xs[at + 96u][c] = x.q1.z;
    xs[at + 112u][c] = x.q1.w;
    xd[g * XD_G + kb * 16u + t / 4u][c] = x.ds.x;
    xm[g * XD_G + kb * 16u + t / 4u][c] = x.ds.y;
}

// The integer sums of one row vec4 (a: 4 rows' words) with one token vec4 (x: 4 tokens' words), token by token.
fn dots(a: vec4<u32>, x: u32) -> vec4<i32> {
    return vec4<i32>(dot4I8Packed(a.x, x), dot4I8Packed(a.y, x), dot4I8Packed(a.z, x), dot4I8Packed(a.w, x));
}

// v summed over the K groups, in group 0's threads (every thread calls it: it has barriers). The staging of the
// weights, free after the last step, carries groups 1 .. KG's vec4s ((KG - 1) LT of them fit in KG WS_G when
// HALVES KB >= 2: kernels.matmul_i8 checks).
fn group_sum(v: vec4<f32>, g: u32, lt: u32) -> vec4<f32> {
    if (KG == 1u) {
        return v;
    }
    if (g > 0u) {
        ws[(g - 1u) * LT + lt] = bitcast<vec4<u32>>(v);
    }
    workgroupBarrier();
    var s = v;
    if (g == 0u) {
        for (var i = 1u; i < KG; i++) {
            s += bitcast<vec4<f32>>(ws[(i - 1u) * LT + lt]);
        }
    }
    workgroupBarrier();
    return s;
}

fn store(t: u32, n: u32, a: vec4<f32>, u: vec4<f32>, n_tokens: u32, z: u32) {
    if (t >= n_tokens) {
        return;
    }
    for (var c = 0u; c < 4u; c++) {
        if (n + c < N) {
            var v = a[c];
            if (GLU) {
                v = gate_act(v) * u[c];
            }
            let y = (z * TMAX + t) * YSTRIDE + YOFF + n + c;      // z: the K part (KS > 1)
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
    let row0 = wid.x * TILE;
    let tok0 = wid.y * 64u;
    if (tok0 >= n_tokens) {
        return;
    }
    let g = tid / LT;            // K group: blocks g KB .. g KB + KB of every KG KB
    let lt = tid % LT;
    let rg = lt % R4;            // rows 4 rg .. 4 rg + 4 of the tile
    let tg = lt / R4;            // tokens 4 tg .. 4 tg + 4
    let gs = g * WS_G;
    let gd = g * WD_G;
    let gm = g * WM_G;
    let gx = g * XS_G;
    let gxd = g * XD_G;
    var a0 = vec4<f32>(0.0); var a1 = vec4<f32>(0.0); var a2 = vec4<f32>(0.0); var a3 = vec4<f32>(0.0);
    var u0 = vec4<f32>(0.0); var u1 = vec4<f32>(0.0); var u2 = vec4<f32>(0.0); var u3 = vec4<f32>(0.0);
    let z = wid.z;               // K part: blocks [z NBS, (z + 1) NBS) (KS > 1)
    let bstart = z * NBS;
    let bend = min(bstart + NBS, NB);
    var wn = load_w(row0, bstart + g * KB, lt, bend);      // a thread's items of its group's first step
    var xn = load_x(tok0, bstart + g * KB, lt, n_tokens, bend);
    for (var s0 = bstart; s0 < bend; s0 += KG * KB) {
        let b0 = s0 + g * KB;
        if (lt < W_ITEMS) { put_w(g, lt, wn); }
        if (lt < X_ITEMS) { put_x(g, lt, xn); }
        workgroupBarrier();
        wn = load_w(row0, b0 + KG * KB, lt, bend);   // the next step's, read while this step's products run
        xn = load_x(tok0, b0 + KG * KB, lt, n_tokens, bend);
        for (var kb = 0u; kb < KB; kb++) {
            let dx = xd[gxd + kb * 16u + tg];
            let sx = xm[gxd + kb * 16u + tg];
            for (var h = 0u; h < SCALES; h++) {        // words SW h .. SW h + SW, scale d_h
                var s0 = vec4<i32>(0); var s1 = vec4<i32>(0); var s2 = vec4<i32>(0); var s3 = vec4<i32>(0);
                var v0 = vec4<i32>(0); var v1 = vec4<i32>(0); var v2 = vec4<i32>(0); var v3 = vec4<i32>(0);
                for (var w = SW * h; w < SW * h + SW; w++) {
                    let x = xs[gx + kb * 128u + 16u * w + tg];
                    let a = ws[gs + (kb * 8u + w) * R4 + rg];
                    s0 += dots(a, x.x); s1 += dots(a, x.y); s2 += dots(a, x.z); s3 += dots(a, x.w);
                    if (TWO) {
                        let u = ws[gs + ((KB + kb) * 8u + w) * R4 + rg];
                        v0 += dots(u, x.x); v1 += dots(u, x.y); v2 += dots(u, x.z); v3 += dots(u, x.w);
                    }
                }
                let d = wd[gd + (kb * 2u + h) * R4 + rg];      // 4 rows' scales of this half
                a0 += vec4<f32>(s0) * d * dx.x;
                a1 += vec4<f32>(s1) * d * dx.y;
                a2 += vec4<f32>(s2) * d * dx.z;
                a3 += vec4<f32>(s3) * d * dx.w;
                if (TWO) {
                    let du = wd[gd + ((KB + kb) * 2u + h) * R4 + rg];
                    u0 += vec4<f32>(v0) * du * dx.x;
                    u1 += vec4<f32>(v1) * du * dx.y;
                    u2 += vec4<f32>(v2) * du * dx.z;
                    u3 += vec4<f32>(v3) * du * dx.w;
                }
            }
            if (OFFSET) {
                let m = wm[gm + kb * R4 + rg];
                a0 += m * sx.x; a1 += m * sx.y; a2 += m * sx.z; a3 += m * sx.w;
                if (TWO) {
                    let mu = wm[gm + (KB + kb) * R4 + rg];
                    u0 += mu * sx.x; u1 += mu * sx.y; u2 += mu * sx.z; u3 += mu * sx.w;
                }
            }
        }
        workgroupBarrier();
    }
    a0 = group_sum(a0, g, lt); a1 = group_sum(a1, g, lt); a2 = group_sum(a2, g, lt); a3 = group_sum(a3, g, lt);
    if (TWO) {
        u0 = group_sum(u0, g, lt); u1 = group_sum(u1, g, lt); u2 = group_sum(u2, g, lt); u3 = group_sum(u3, g, lt);
    }
    if (g > 0u) {
        return;
    }
    let n = row0 + 4u * rg;
    let t = tok0 + 4u * tg;
    store(t, n, a0, u0, n_tokens, z);
    store(t + 1u, n, a1, u1, n_tokens, z);
    store(t + 2u, n, a2, u2, n_tokens, z);
    store(t + 3u, n, a3, u3, n_tokens, z);
    if (PAIR) {                  // the second set of rows (store's u is GLU's only)
        store(t, n + TR, u0, u0, n_tokens, z);
        store(t + 1u, n + TR, u1, u1, n_tokens, z);
        store(t + 2u, n + TR, u2, u2, n_tokens, z);
        store(t + 3u, n + TR, u3, u3, n_tokens, z);
    }
}
