// Matrix-vector product with 8-bit activations, for passes of one token (decode), the LM head (LAST_ONLY) and
// speculative decoding's verify passes (a few tokens, each computed exactly as a one-token pass computes it, by
// workgroups of their own):
//   Y[t, YOFF + n] (+)= sum_k W[n, k] * q8(xin[t])[k]     with xin = X (NORM false) or X * G (NORM true, the
//                                                          RMSNorm's 1/rms applied to the result)
//   GLU: Y[t, YOFF + n] = act(a) * b, a and b the products of rows n and N + n (gate and up rows stacked)
// exactly the semantics of matmul.wgsl (ACCUM, GLU, GELU, LAST_ONLY, YSTRIDE, YOFF), so models/transformer.py
// linear() can use either. q8(v) quantizes v in blocks of 32 the way llama.cpp's Q8 activations are: per block a
// scale dx = max|v| / 127 and 32 int8 values round(v / dx). Each workgroup quantizes the token's whole row into
// workgroup memory, then dots its rows with it four int8 products an instruction (dot4I8Packed on the weights'
// integer values), one float multiply per group of products sharing a weight scale and an activation scale.
// The weight format is a separate file (formats_matvec_q8/*.wgsl) providing ITEMS (items a row) and item_dot(row, b):
// the f32 dot product of item b of a row (a fixed group of the row's weights) with the quantized input in qx / xd.
//
// Compile-time constants (prepended by cera_web/kernels.py):
//   K, N, NORM, EPS, ACCUM, GLU, GELU, LAST_ONLY, YSTRIDE, YOFF   as in matmul.wgsl (K a multiple of 32)
//   LANES      threads sharing a row (a power of two <= WG); WG / LANES rows a workgroup
//   WG         threads per workgroup
//   TOKENS     workgroups a group of rows: one per token of a verify pass (its tokens computed side by side, each
//              as a decode step computes it); 1 for decode steps and LAST_ONLY
//   SG         reduce a row's lanes with subgroup shuffles (only where every subgroup has at least LANES
//              invocations, numbered in local_invocation_index order; see matmul.wgsl)
//   PARTIAL    WG without SG (the lanes' workgroup-memory reduction), 1 with SG
//   XSPLIT     1, or the SPLIT of a split decode attention whose partial results X holds: input k of token t, of
//              head h = k / XHD (XHD a multiple of 32), is sum_s e^(m_s - M) acc_s[k] / sum_s e^(m_s - M) l_s over
//              the ranges s the attention used (range 0 says how many), M = max_s m_s, combined as each block is
//              loaded (attention_decode.wgsl says why)
// Workgroup memory: K bytes of int8 inputs, 8 bytes per 32 inputs (scale, sum of squares), 16 * PARTIAL bytes;
// kernels.matvec_q8_fits checks it against the device's limit.
// Bindings:
//   0 W: array<WORD>             packed weights, N rows (2N with GLU); WORD is u32, or vec4<u32> for formats whose
//                                blocks are 16-byte aligned (Q4_K: one 16-byte load an item)
//   1 X: array<vec4<f32>>        [n_tokens, K]; with XSPLIT > 1 per token [XSPLIT, K] sums then
//                                [XSPLIT, K / XHD] (m, l, ranges used, -)
//   2 Y: array<f32>              [n_tokens, YSTRIDE]  ([1, YSTRIDE] with LAST_ONLY)
//   3 step: uniform Step
//   4 G: array<vec4<f32>>        [K] the norm's gain (read only with NORM; bind any buffer otherwise)
// Dispatch: TOKENS * ceil(N / (WG / LANES)) workgroups of WG threads (kernels.matvec_q8_groups), spread over x and
// y (flat_group); flat workgroup g computes token g % TOKENS (neighbouring workgroups share rows, so a verify pass
// reads each weight from memory about once) of rows from (g / TOKENS) * WG / LANES, and does nothing past the
// pass's tokens. Every thread quantizes blocks of 32 inputs (one thread a block), a barrier, then each row's LANES
// threads stride over its items and their sums meet in shuffles or workgroup memory.
@group(0) @binding(0) var<storage, read> W: array<WORD>;   // WORD: u32, or vec4<u32> where a format reads 16 bytes
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;
@group(0) @binding(4) var<storage, read> G: array<vec4<f32>>;

const ROWS: u32 = WG / LANES;    // rows per workgroup
const NB: u32 = K / 32u;         // activation blocks per row
const K4: u32 = K / 4u;

var<workgroup> qx: array<u32, K4>;           // the token's input, 4 int8 a word (word i: inputs 4i .. 4i+4)
var<workgroup> xd: array<f32, NB>;           // each block's scale dx
var<workgroup> xss: array<f32, NB>;          // each block's sum of squares of X (for the norm)
var<workgroup> partial: array<vec4<f32>, PARTIAL>;

// The 8 vec4s of X from b (written out: loops over a private array keep it in local memory on some GPUs).
fn x8(b: u32) -> array<vec4<f32>, 8> {
    return array<vec4<f32>, 8>(X[b], X[b + 1u], X[b + 2u], X[b + 3u], X[b + 4u], X[b + 5u], X[b + 6u], X[b + 7u]);
}

fn add8(a: array<vec4<f32>, 8>, b: array<vec4<f32>, 8>) -> array<vec4<f32>, 8> {
    return array<vec4<f32>, 8>(a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4], a[5] + b[5],
                               a[6] + b[6], a[7] + b[7]);
}

fn scale8(a: array<vec4<f32>, 8>, w: f32) -> array<vec4<f32>, 8> {
    return array<vec4<f32>, 8>(w * a[0], w * a[1], w * a[2], w * a[3], w * a[4], w * a[5], w * a[6], w * a[7]);
}

// Block j (32 inputs) of token t's input. With XSPLIT the ranges are merged four at a time, each four's loads issued
// together (a range past the last used repeats it, with weight 0): a loop of one range a pass waits for each range's
// loads in turn, and at long contexts that wait was the combine's cost (session 21).
fn load_block(t: u32, j: u32) -> array<vec4<f32>, 8> {
    if (XSPLIT == 1u) {
        return x8(t * K4 + j * 8u);
    }
    const HEADS: u32 = K / XHD;
    let o = t * XSPLIT * (K4 + HEADS) + j * 8u;   // token t's partial results, at this block
    let ml = t * XSPLIT * (K4 + HEADS) + XSPLIT * K4 + j * 32u / XHD;   // (m, l, used) of range s: X[ml + s * HEADS]
    let last = clamp(u32(X[ml].z), 1u, XSPLIT) - 1u;     // the last range used (1 .. XSPLIT of them)
    var mx = -3.0e38;
    var l = 0.0;
    var v = array<vec4<f32>, 8>();
    for (var s = 0u; s <= last; s += 4u) {
        let s1 = min(s + 1u, last);
        let s2 = min(s + 2u, last);
        let s3 = min(s + 3u, last);
        let r0 = X[ml + s * HEADS];
        let r1 = X[ml + s1 * HEADS];
        let r2 = X[ml + s2 * HEADS];
        let r3 = X[ml + s3 * HEADS];
        let a0 = x8(o + s * K4);
        let a1 = x8(o + s1 * K4);
        let a2 = x8(o + s2 * K4);
        let a3 = x8(o + s3 * K4);
        let big = max(max(mx, r0.x), max(max(r1.x, r2.x), r3.x));
        let keep = exp(mx - big);
        let w = exp(vec4<f32>(r0.x, r1.x, r2.x, r3.x) - big)
              * vec4<f32>(1.0, f32(s + 1u <= last), f32(s + 2u <= last), f32(s + 3u <= last));
        l = l * keep + dot(w, vec4<f32>(r0.y, r1.y, r2.y, r3.y));
        v = add8(add8(scale8(v, keep), scale8(a0, w.x)), add8(scale8(a1, w.y), add8(scale8(a2, w.z), scale8(a3, w.w))));
        mx = big;
    }
    return scale8(v, 1.0 / l);
}

// Quantize block j of token t's input into qx / xd (and its sum of squares into xss). Written out element by
// element: loops over a private array (v[i]) may keep it in local memory where the compiler does not unroll them.
fn quantize_block(t: u32, j: u32) {
    let v = load_block(t, j);
    let ss = dot(v[0], v[0]) + dot(v[1], v[1]) + dot(v[2], v[2]) + dot(v[3], v[3])
           + dot(v[4], v[4]) + dot(v[5], v[5]) + dot(v[6], v[6]) + dot(v[7], v[7]);
    var x0 = v[0]; var x1 = v[1]; var x2 = v[2]; var x3 = v[3];
    var x4 = v[4]; var x5 = v[5]; var x6 = v[6]; var x7 = v[7];
    if (NORM) {
        let g = j * 8u;
        x0 *= G[g]; x1 *= G[g + 1u]; x2 *= G[g + 2u]; x3 *= G[g + 3u];
        x4 *= G[g + 4u]; x5 *= G[g + 5u]; x6 *= G[g + 6u]; x7 *= G[g + 7u];
    }
    let a = max(max(max(abs(x0), abs(x1)), max(abs(x2), abs(x3))), max(max(abs(x4), abs(x5)), max(abs(x6), abs(x7))));
    let d = max(max(a.x, a.y), max(a.z, a.w)) / 127.0;
    let inv = select(0.0, 1.0 / d, d > 0.0);
    let q = j * 8u;
    qx[q] = pack4xI8(vec4<i32>(round(x0 * inv)));
    qx[q + 1u] = pack4xI8(vec4<i32>(round(x1 * inv)));
    qx[q + 2u] = pack4xI8(vec4<i32>(round(x2 * inv)));
    qx[q + 3u] = pack4xI8(vec4<i32>(round(x3 * inv)));
    qx[q + 4u] = pack4xI8(vec4<i32>(round(x4 * inv)));
    qx[q + 5u] = pack4xI8(vec4<i32>(round(x5 * inv)));
    qx[q + 6u] = pack4xI8(vec4<i32>(round(x6 * inv)));
    qx[q + 7u] = pack4xI8(vec4<i32>(round(x7 * inv)));
    xd[j] = d;
    xss[j] = ss;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let g = flat_group(wid, nwg);
    let row = g / TOKENS * ROWS + tid / LANES;
    let r = min(row, N - 1u);          // rows past N compute row N - 1 and write nothing
    let lane = tid % LANES;
    var t = g % TOKENS;
    if (LAST_ONLY) {
        t = step.n_tokens - 1u;
    }
    if (t >= step.n_tokens) {          // the whole workgroup: a token past a shorter verify pass
        return;
    }
    for (var j = tid; j < NB; j += WG) {
        quantize_block(t, j);
    }
    workgroupBarrier();
    // (product of row r, of row r + N with GLU, sum of squares of X, unused): this lane's share
    var acc = vec4<f32>(0.0);
    var b = lane;
    for (; b + 3u * LANES < ITEMS; b += 4u * LANES) {   // four items in flight
        var d = vec4<f32>(item_dot(r, b), item_dot(r, b + LANES), item_dot(r, b + 2u * LANES),
                          item_dot(r, b + 3u * LANES));
        acc.x += (d.x + d.y) + (d.z + d.w);
        if (GLU) {
            d = vec4<f32>(item_dot(r + N, b), item_dot(r + N, b + LANES), item_dot(r + N, b + 2u * LANES),
                          item_dot(r + N, b + 3u * LANES));
            acc.y += (d.x + d.y) + (d.z + d.w);
        }
    }
    for (; b < ITEMS; b += LANES) {
        acc.x += item_dot(r, b);
        if (GLU) {
            acc.y += item_dot(r + N, b);
        }
    }
    if (NORM) {
        for (var j = lane; j < NB; j += LANES) { acc.z += xss[j]; }
    }
    if (LANES > 1u) {
        if (SG) {
            for (var m = LANES / 2u; m > 0u; m /= 2u) { acc += shuffle_xor(acc, m); }
        } else {
            partial[tid] = acc;
            workgroupBarrier();
            for (var stride = LANES / 2u; stride > 0u; stride /= 2u) {
                if (lane < stride) { partial[tid] += partial[tid + stride]; }
                workgroupBarrier();
            }
            acc = partial[tid];
        }
    }
    if (lane == 0u && row < N) {
        var out_row = t;
        if (LAST_ONLY) { out_row = 0u; }
        let y = out_row * YSTRIDE + YOFF + row;
        var xscale = 1.0;
        if (NORM) {
            xscale = 1.0 / sqrt(acc.z / f32(K) + EPS);
        }
        var v = acc.x * xscale;
        if (GLU) {
            v = gate_act(v) * acc.y * xscale;
        }
        if (ACCUM) {
            Y[y] += v;
        } else {
            Y[y] = v;
        }
    }
}
