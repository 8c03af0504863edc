// Q6_K weights: each row is K/256 super-blocks of 210 bytes:
//   bytes 0..127    ql: low 4 bits
//   bytes 128..191  qh: high 2 bits
//   bytes 192..207  16 int8 scales sc[s], one per 16 weights
//   bytes 208..209  d (f16)
// Weight n*128 + k*32 + l of a super-block (n < 2, k < 4, l < 32) is d * sc[n*8 + 2k + l/16] * (q - 32), with
// q = (nibble k/2 of ql[n*64 + (k%2)*32 + l]) | ((qh[n*32 + l] >> 2k) & 3) << 4.
// Super-blocks start on 2-byte boundaries: read_u32 and read_u32_even (bytes.wgsl) shift. Provides w8(row, oct);
// needs q6.wgsl (q6_quad, q6_i8).
const ROW_BYTES: u32 = K / 256u * 210u;

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let base = row * ROW_BYTES + (oct / 32u) * 210u;
    let o = oct % 32u;                 // weights 8o .. 8o+8 of the super-block: n = o / 16, k = (o / 4) % 4
    let n = o / 16u;
    let k = (o / 4u) % 4u;
    let l0 = (o % 4u) * 8u;
    let lo = base + n * 64u + (k % 2u) * 32u + l0;
    let hi = base + 128u + n * 32u + l0;
    let sc = q6_i8(read_u32(base + 192u + n * 8u + 2u * k + l0 / 16u), 0u);
    let scale = read_f16(base + 208u) * sc;
    return array<vec4<f32>, 2>(q6_quad(read_u32(lo) >> (4u * (k / 2u)), read_u32(hi) >> (2u * k)) * scale,
                               q6_quad(read_u32(lo + 4u) >> (4u * (k / 2u)), read_u32(hi + 4u) >> (2u * k)) * scale);
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Blocks of BLOCK = 32 weights, INTERLEAVED: block b is part c = b % 8 of super-block b / 8, the weights stored in
// word column c of the super-block (ql bytes n*64 + h*32 + 4c .. +4 and qh bytes n*32 + 4c .. +4 for n, h < 2:
// weights n*128 + k*32 + 4c .. +4 for k < 4). Each block_dot adds the products of 32 distinct weights with their own
// inputs and the 8 parts of a super-block cover it exactly once, so a row's sum is the same as with contiguous
// blocks; but the lanes sharing a row (neighbouring b) now read neighbouring words of W and neighbouring vec4s of X,
// which on a GPU is several times faster than each lane reading a whole block of its own (measured on an H200). x is
// the vec4 index block b would have if it were contiguous (t*K/4 + b*8); block_dot reads xin over its whole super-
// block, from x - c*8 on.
const BLOCK: u32 = 32u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let c = b % 8u;
    let x0 = x - c * 8u;
    let base = row * ROW_BYTES + (b / 8u) * 210u;
    let d = unpack2x16float(read_u32_even(base + 208u)).x;
    let pick = c / 4u;                 // weights 4c .. lie in the second 16-weight sub-block of each k when c >= 4
    var acc = 0.0;
    for (var n = 0u; n < 2u; n++) {
        let l0 = read_u32_even(base + 64u * n + 4u * c);          // ql[n*64 + 4c ..]: k = 0 (low nibbles), 2 (high)
        let l1 = read_u32_even(base + 64u * n + 32u + 4u * c);    // ql[n*64 + 32 + 4c ..]: k = 1, 3
        let h = read_u32_even(base + 128u + 32u * n + 4u * c);    // qh[n*32 + 4c ..]: bits 2k, 2k+1
        let sa = read_u32_even(base + 192u + 8u * n);     // scales n*8 .. n*8+4: the sub-blocks of k = 0, 1
        let sb = read_u32_even(base + 196u + 8u * n);     // scales n*8+4 .. n*8+8: k = 2, 3
        let xb = x0 + 32u * n + c;
        acc += q6_i8(sa, pick) * dot(q6_quad(l0, h), xin(xb))
             + q6_i8(sa, 2u + pick) * dot(q6_quad(l1, h >> 2u), xin(xb + 8u))
             + q6_i8(sb, pick) * dot(q6_quad(l0 >> 4u, h >> 4u), xin(xb + 16u))
             + q6_i8(sb, 2u + pick) * dot(q6_quad(l1 >> 4u, h >> 6u), xin(xb + 24u));
    }
    return d * acc;
}
