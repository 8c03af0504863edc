// Q6_K weights in the aligned layout (cera_web/quants.py aligned_layout, made at upload by repack.wgsl): the buffer
// holds WROWS rows of K/256 super-blocks; super-block i = row * K/256 + s has its 192 bytes of 6-bit values (ql then
// qh, as in the file) at words 48i .. 48i + 48, its 16 int8 scales at words SCW + 4i .. + 4 and its f16 d in half
// i % 2 of word DW + i / 2. Weights as in q6_k.wgsl. Provides w8(row, oct); needs q6.wgsl.
const NBK: u32 = K / 256u;
const SCW: u32 = WROWS * NBK * 48u;
const DW: u32 = SCW + WROWS * NBK * 4u;

fn q6a_d(i: u32) -> f32 {
    return unpack2x16float(W[DW + i / 2u])[i % 2u];
}

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let i = row * NBK + oct / 32u;
    let o = oct % 32u;                 // weights 8o .. 8o+8 of the super-block: n = o / 16, k = (o / 4) % 4
    let n = o / 16u;
    let k = (o / 4u) % 4u;
    let l0 = (o % 4u) * 8u;
    let lo = 48u * i + (n * 64u + (k % 2u) * 32u + l0) / 4u;
    let hi = 48u * i + (128u + n * 32u + l0) / 4u;
    let s = n * 8u + 2u * k + l0 / 16u;
    let scale = q6a_d(i) * q6_i8(W[SCW + 4u * i + s / 4u], s % 4u);
    return array<vec4<f32>, 2>(q6_quad(W[lo] >> (4u * (k / 2u)), W[hi] >> (2u * k)) * scale,
                               q6_quad(W[lo + 1u] >> (4u * (k / 2u)), W[hi + 1u] >> (2u * k)) * scale);
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Blocks of BLOCK = 32 weights, interleaved as in q6_k.wgsl: block b is word column c = b % 8 of super-block b / 8.
const BLOCK: u32 = 32u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let c = b % 8u;
    let x0 = x - c * 8u;
    let i = row * NBK + b / 8u;
    let base = 48u * i;
    let pick = c / 4u;
    var acc = 0.0;
    for (var n = 0u; n < 2u; n++) {
        let l0 = W[base + 16u * n + c];              // ql[n*64 + 4c ..]: k = 0 (low nibbles), 2 (high)
        let l1 = W[base + 16u * n + 8u + c];         // ql[n*64 + 32 + 4c ..]: k = 1, 3
        let h = W[base + 32u + 8u * n + c];          // qh[n*32 + 4c ..]: bits 2k, 2k+1
        let sa = W[SCW + 4u * i + 2u * n];           // scales n*8 .. n*8+4: the sub-blocks of k = 0, 1
        let sb = W[SCW + 4u * i + 2u * n + 1u];      // scales n*8+4 .. n*8+8: k = 2, 3
        let xb = x0 + 32u * n + c;
        acc += q6_i8(sa, pick) * dot(q6_quad(l0, h), xin(xb))
             + q6_i8(sa, 2u + pick) * dot(q6_quad(l1, h >> 2u), xin(xb + 8u))
             + q6_i8(sb, pick) * dot(q6_quad(l0 >> 4u, h >> 4u), xin(xb + 16u))
             + q6_i8(sb, 2u + pick) * dot(q6_quad(l1 >> 4u, h >> 6u), xin(xb + 24u));
    }
    return q6a_d(i) * acc;
}
