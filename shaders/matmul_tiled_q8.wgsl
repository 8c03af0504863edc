// Tiled matrix-matrix product on 8-bit activations (prefill), with WGSL's packed int8 dot product:
//   Y[t, YOFF + n] (+)= sum_b sum_j W[n, 32b + j] * xq[t, b, j]
//   GLU: Y[t, YOFF + n] = act(W[n, :] · xq[t]) * (W[N + n, :] · xq[t])   (act: SiLU, or GELU-tanh with GELU)
// where xq[t, b, j] = d[t, b] q[t, b, j] are the 8-bit blocks of quantize_rows.wgsl (the RMSNorm is fused there) and
// each weight of a 32-block is a[n, b, h] w_q + m[n, b]: int8 w_q, a scale per half block h (NH = 2 halves of 16
// for Q6_K, else 1) and an offset m (HAS_MIN: Q4_1, Q4_K). So one block's contribution is
//   d[t, b] * sum_h a[n, b, h] * dot4I8Packed-sums over the half's words + m[n, b] * s[t, b]   (s = d sum q).
// The format file gives wblock(row, b): the 8 words of int8 weights of 32-block b (weights 4w .. 4w + 4 in word w,
// as in the activations), its scales and offset.
// Each workgroup computes TR rows x TT tokens, each thread RR rows x RT tokens (RR, RT: 4 or 8; its rows are the
// vec4 columns rg, rg + TR / RR, ... of the tile so that neighbouring threads read neighbouring words). It walks K
// KB blocks a step: the step's weight blocks (unpacked to int8 words) and activation blocks go to workgroup memory,
// k-major, as vec4s of 4 rows / 4 tokens; each word of the step costs a thread RR / 4 + RT / 4 vec4 reads and
// RR * RT dot4I8Packed. The next step's blocks are fetched into registers while the current one is multiplied.
//
// DOT4 false computes the same integer sums with f32 multiply-adds on unpacked bytes instead (exact: |sum| < 2^24):
// for backends that emulate dot4I8Packed (naga emits Vulkan's OpSDot only when wgpu's native packed dot product
// feature is on, which wgpu-native's feature list cannot request: likely emulated natively, not verified), where
// it still reads a quarter of the f32 kernel's workgroup memory.
//
// Constants: K (a multiple of 32), N, ACCUM, GLU, GELU, YSTRIDE, YOFF, TR, TT, RR, RT, KB, NH, HAS_MIN, DOT4;
//   kernels.matmul_tiled_q8.
// Bindings:
//   0 W: array<u32>     packed weights, N rows (2N with GLU)
//   1 XQ: array<u32>    [n_tokens, K / 32, 10] activation blocks {d, s, 8 words of int8} (quantize_rows.wgsl)
//   2 Y: array<f32>     [n_tokens, YSTRIDE]
//   3 step: uniform Step
// Dispatch: (ceil(N / TR), ceil(n_tokens_max / TT)) workgroups of (TR / RR) * (TT / RT) threads
//   (kernels.tiled_q8_groups); token tiles past the pass's end return at once.
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> XQ: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;

// One 32-weight block of a row as int8 words: weight 4w + i in byte i of q0[w] (w < 4) or q1[w - 4];
// weight = d[h] * int8 + m, h = 0 for the first 16 weights, 1 for the rest (equal unless NH = 2).
struct WBlock {
    q0: vec4<u32>,
    q1: vec4<u32>,
    d: vec2<f32>,
    m: f32,
}

struct XBlock {
    q0: vec4<u32>,
    q1: vec4<u32>,
    d: f32,
    s: f32,
}

const NB: u32 = K / 32u;                         // blocks a row
const TR4: u32 = TR / 4u;
const TT4: u32 = TT / 4u;
const RR4: u32 = RR / 4u;                        // vec4s of rows a thread
const RT4: u32 = RT / 4u;
const RGN: u32 = TR / RR;                        // threads along the rows
const TGN: u32 = TT / RT;
const WG: u32 = RGN * TGN;
const HALVES: u32 = select(1u, 2u, GLU);         // gate (and up) rows
const W_ITEMS: u32 = HALVES * TR * KB;           // weight blocks a step
const X_ITEMS: u32 = TT * KB;                    // activation blocks a step
const WI: u32 = (W_ITEMS + WG - 1u) / WG;        // weight blocks a thread fetches a step
const XI: u32 = (X_ITEMS + WG - 1u) / WG;
const WPH: u32 = 8u / NH;                        // words a scale covers

var<workgroup> wq: array<vec4<u32>, HALVES * KB * 8u * TR4>;   // [half][block][word][row / 4]
var<workgroup> wd: array<vec4<f32>, HALVES * KB * NH * TR4>;   // [half][block][h][row / 4]
var<workgroup> wm: array<vec4<f32>, select(1u, HALVES * KB * TR4, HAS_MIN)>;
var<workgroup> xq: array<vec4<u32>, KB * 8u * TT4>;            // [block][word][token / 4]
var<workgroup> xd: array<vec4<f32>, KB * TT4>;
var<workgroup> xs: array<vec4<f32>, select(1u, KB * TT4, HAS_MIN)>;

// Bytes v (each < 2 bias) minus bias, as two's complement bytes (bias 8, 16 or 32): v ^ bias is the value in
// log2(bias) + 1 bits; its sign bit is spread over the byte's high bits (times 256 / bias - 2, no carries).
fn sub_bias(v: vec4<u32>, bias: u32) -> vec4<u32> {
    let b4 = vec4<u32>(bias * 0x01010101u);
    let t = v ^ b4;
    return t | ((t & b4) * (256u / bias - 2u));
}

// Weight item i of the step at block b0: rows fastest, then blocks, then gate/up.
fn fetch_w(row0: u32, b0: u32, i: u32) -> WBlock {
    let r = i % TR;
    let kb = (i / TR) % KB;
    let h = i / (TR * KB);
    if (i >= W_ITEMS || row0 + r >= N || b0 + kb >= NB) {
        return WBlock(vec4<u32>(0u), vec4<u32>(0u), vec2<f32>(0.0), 0.0);
    }
    return wblock(row0 + r + h * N, b0 + kb);
}

fn put_w(i: u32, w: WBlock) {
    if (i >= W_ITEMS) {
        return;
    }
    let r = i % TR;
    let hb = i / TR;                     // h * KB + kb
    let c = r % 4u;
    let base = hb * 8u * TR4 + r / 4u;
    wq[base][c] = w.q0.x;
    wq[base + TR4][c] = w.q0.y;
    wq[base + 2u * TR4][c] = w.q0.z;
    wq[base + 3u * TR4][c] = w.q0.w;
    wq[base + 4u * TR4][c] = w.q1.x;
    wq[base + 5u * TR4][c] = w.q1.y;
    wq[base + 6u * TR4][c] = w.q1.z;
    wq[base + 7u * TR4][c] = w.q1.w;
    wd[hb * NH * TR4 + r / 4u][c] = w.d.x;
    if (NH == 2u) {
        wd[(hb * NH + 1u) * TR4 + r / 4u][c] = w.d.y;
    }
    if (HAS_MIN) {
        wm[hb * TR4 + r / 4u][c] = w.m;
    }
}

// Activation item i of the step at block b0: tokens fastest, then blocks.
fn fetch_x(tok0: u32, b0: u32, i: u32, n_tokens: u32) -> XBlock {
    let tt = i % TT;
    let kb = i / TT;
    if (i >= X_ITEMS || tok0 + tt >= n_tokens || b0 + kb >= NB) {
        return XBlock(vec4<u32>(0u), vec4<u32>(0u), 0.0, 0.0);
    }
    let o = ((tok0 + tt) * NB + b0 + kb) * 10u;
    return XBlock(vec4<u32>(XQ[o + 2u], XQ[o + 3u], XQ[o + 4u], XQ[o + 5u]),
                  vec4<u32>(XQ[o + 6u], XQ[o + 7u], XQ[o + 8u], XQ[o + 9u]),
                  bitcast<f32>(XQ[o]), bitcast<f32>(XQ[o + 1u]));
}

fn put_x(i: u32, x: XBlock) {
    if (i >= X_ITEMS) {
        return;
    }
    let tt = i % TT;
    let kb = i / TT;
    let c = tt % 4u;
    let base = kb * 8u * TT4 + tt / 4u;
    xq[base][c] = x.q0.x;
    xq[base + TT4][c] = x.q0.y;
    xq[base + 2u * TT4][c] = x.q0.z;
    xq[base + 3u * TT4][c] = x.q0.w;
    xq[base + 4u * TT4][c] = x.q1.x;
    xq[base + 5u * TT4][c] = x.q1.y;
    xq[base + 6u * TT4][c] = x.q1.z;
    xq[base + 7u * TT4][c] = x.q1.w;
    xd[kb * TT4 + tt / 4u][c] = x.d;
    if (HAS_MIN) {
        xs[kb * TT4 + tt / 4u][c] = x.s;
    }
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

const BIAS8: u32 = 0x80808080u;

// Byte k of each word of u, which holds int8 values + 128 (w ^ BIAS8), as the int8 values in f32: the byte as the
// low mantissa bits of 2^23 (exact), minus 2^23 + 128. Bit operations and one add, no integer-to-float conversion
// (a quarter-rate instruction on NVIDIA GPUs).
fn byte_f32(u: vec4<u32>, k: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(((u >> vec4<u32>(8u * k)) & vec4<u32>(0xFFu)) | vec4<u32>(0x4B000000u)) - 8388736.0;
}

// The products of block kb of the step with weight rows hb (kb, or KB + kb for the up rows) added into acc: per half
// block p, RR x RT sums of dot4I8Packed in i32, then one multiply-add each by the two scales; and the offsets' term.
// (acc is a pointer so that every index is constant once the loops are unrolled: registers, not memory.)
fn block_products(acc: ptr<function, array<vec4<f32>, RT * RR4>>, hb: u32, kb: u32, rg: u32, tg: u32) {
    var dx: array<vec4<f32>, RT4>;
    for (var j = 0u; j < RT4; j++) { dx[j] = xd[kb * TT4 + tg + j * TGN]; }
    for (var p = 0u; p < NH; p++) {
        var sums: array<vec4<f32>, RT * RR4>;       // the half block's integer sums (exact in f32: < 2^24)
        if (DOT4) {
            var isum: array<vec4<i32>, RT * RR4>;
            for (var i = 0u; i < RT * RR4; i++) {
                isum[i] = vec4<i32>(0);
            }
            for (var w = p * WPH; w < p * WPH + WPH; w++) {
                var a: array<vec4<u32>, RR4>;
                for (var i = 0u; i < RR4; i++) { a[i] = wq[(hb * 8u + w) * TR4 + rg + i * RGN]; }
                for (var j = 0u; j < RT4; j++) {
                    let x = xq[(kb * 8u + w) * TT4 + tg + j * TGN];
                    for (var c = 0u; c < 4u; c++) {
                        for (var i = 0u; i < RR4; i++) {
                            let s = (j * 4u + c) * RR4 + i;
                            isum[s] += vec4<i32>(dot4I8Packed(a[i].x, x[c]), dot4I8Packed(a[i].y, x[c]),
                                                 dot4I8Packed(a[i].z, x[c]), dot4I8Packed(a[i].w, x[c]));
                        }
                    }
                }
            }
            for (var i = 0u; i < RT * RR4; i++) {
                sums[i] = vec4<f32>(isum[i]);
            }
        } else {    // the same sums with f32 multiply-adds on unpacked bytes (where dot4I8Packed is emulated)
            for (var i = 0u; i < RT * RR4; i++) {
                sums[i] = vec4<f32>(0.0);
            }
            for (var w = p * WPH; w < p * WPH + WPH; w++) {
                var a: array<vec4<u32>, RR4>;       // bytes + 128 (see byte_f32)
                var x: array<vec4<u32>, RT4>;
                for (var i = 0u; i < RR4; i++) { a[i] = wq[(hb * 8u + w) * TR4 + rg + i * RGN] ^ vec4<u32>(BIAS8); }
                for (var j = 0u; j < RT4; j++) { x[j] = xq[(kb * 8u + w) * TT4 + tg + j * TGN] ^ vec4<u32>(BIAS8); }
                for (var k = 0u; k < 4u; k++) {     // byte k of each word: weight / input 4w + k
                    var wf: array<vec4<f32>, RR4>;
                    for (var i = 0u; i < RR4; i++) {
                        wf[i] = byte_f32(a[i], k);
                    }
                    for (var j = 0u; j < RT4; j++) {
                        let xf = byte_f32(x[j], k);
                        for (var c = 0u; c < 4u; c++) {
                            for (var i = 0u; i < RR4; i++) {
                                let s = (j * 4u + c) * RR4 + i;
                                sums[s] += wf[i] * xf[c];
                            }
                        }
                    }
                }
            }
        }
        for (var i = 0u; i < RR4; i++) {
            let dw = wd[(hb * NH + p) * TR4 + rg + i * RGN];
            for (var j = 0u; j < RT4; j++) {
                for (var c = 0u; c < 4u; c++) {
                    let s = (j * 4u + c) * RR4 + i;
                    (*acc)[s] += (dw * dx[j][c]) * sums[s];
                }
            }
        }
    }
    if (HAS_MIN) {
        for (var i = 0u; i < RR4; i++) {
            let m = wm[hb * TR4 + rg + i * RGN];
            for (var j = 0u; j < RT4; j++) {
                let sx = xs[kb * TT4 + tg + j * TGN];
                for (var c = 0u; c < 4u; c++) {
                    (*acc)[(j * 4u + c) * RR4 + i] += m * sx[c];
                }
            }
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let row0 = wid.x * TR;
    let tok0 = wid.y * TT;
    let n_tokens = step.n_tokens;
    if (tok0 >= n_tokens) {
        return;
    }
    let rg = tid % RGN;       // rows 4 (rg + i RGN) .. + 4 for i < RR4
    let tg = tid / RGN;       // tokens 4 (tg + j TGN) .. + 4 for j < RT4
    // acc[t * RR4 + i]: token t of this thread, its rows' vec4 i; up: the same for the up rows (GLU)
    var acc: array<vec4<f32>, RT * RR4>;
    var up: array<vec4<f32>, RT * RR4>;
    for (var i = 0u; i < RT * RR4; i++) {
        acc[i] = vec4<f32>(0.0);
        up[i] = vec4<f32>(0.0);
    }
    var wr: array<WBlock, WI>;
    var xr: array<XBlock, XI>;
    for (var i = 0u; i < WI; i++) { wr[i] = fetch_w(row0, 0u, tid + i * WG); }
    for (var i = 0u; i < XI; i++) { xr[i] = fetch_x(tok0, 0u, tid + i * WG, n_tokens); }
    for (var b0 = 0u; b0 < NB; b0 += KB) {
        workgroupBarrier();
        for (var i = 0u; i < WI; i++) { put_w(tid + i * WG, wr[i]); }
        for (var i = 0u; i < XI; i++) { put_x(tid + i * WG, xr[i]); }
        workgroupBarrier();
        if (b0 + KB < NB) {
            for (var i = 0u; i < WI; i++) { wr[i] = fetch_w(row0, b0 + KB, tid + i * WG); }
            for (var i = 0u; i < XI; i++) { xr[i] = fetch_x(tok0, b0 + KB, tid + i * WG, n_tokens); }
        }
        for (var kb = 0u; kb < KB; kb++) {
            block_products(&acc, kb, kb, rg, tg);
            if (GLU) {
                block_products(&up, KB + kb, kb, rg, tg);
            }
        }
    }
    for (var j = 0u; j < RT4; j++) {
        for (var c = 0u; c < 4u; c++) {
            let t = tok0 + 4u * (tg + j * TGN) + c;
            if (t >= n_tokens) {
                continue;
            }
            for (var i = 0u; i < RR4; i++) {
                let s = (j * 4u + c) * RR4 + i;
                let n0 = row0 + 4u * (rg + i * RGN);
                let g = acc[s];
                let u = up[s];
                store1(t, n0, g.x, u.x);
                store1(t, n0 + 1u, g.y, u.y);
                store1(t, n0 + 2u, g.z, u.z);
                store1(t, n0 + 3u, g.w, u.w);
            }
        }
    }
}
