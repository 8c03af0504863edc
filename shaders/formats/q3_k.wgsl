// Q3_K weights: each row is K/256 super-blocks of 110 bytes:
//   bytes 0..31     hmask: high bits
//   bytes 32..95    qs: low 2 bits
//   bytes 96..107   16 six-bit scales sc[i], stored + 32: low 4 bits in bytes 0..7 (low nibbles for i < 8, high
//                   nibbles for i >= 8, byte i % 8), top 2 bits in bytes 8..11 (byte 8 + i % 4, bits 2*(i/4))
//   bytes 108..109  d (f16)
// Weight n*128 + j*32 + l of a super-block (n < 2, j < 4, l < 32) is d * (sc[n*8 + 2j + l/16] - 32) * (q - 4),
// with q = ((qs[n*32 + l] >> 2j) & 3) | ((hmask[l] >> (4n + j)) & 1) << 2.
// Super-blocks start on 2-byte boundaries: read_u32 and read_u32_even (bytes.wgsl) shift. Provides w8(row, oct).
const ROW_BYTES: u32 = K / 256u * 110u;

// Four 3-bit values minus 4: bits 0..1 of the bytes of q, bit 0 of the bytes of h on top.
fn q3_quad(q: u32, h: u32) -> vec4<f32> {
    let v = (q & 0x03030303u) | ((h & 0x01010101u) << 2u);
    return vec4<f32>(vec4<u32>(v, v >> 8u, v >> 16u, v >> 24u) & vec4<u32>(7u)) - 4.0;
}

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let base = row * ROW_BYTES + (oct / 32u) * 110u;
    let o = oct % 32u;                 // weights 8o .. 8o+8 of the super-block: n = o / 16, j = (o / 4) % 4
    let n = o / 16u;
    let j = (o / 4u) % 4u;
    let l0 = (o % 4u) * 8u;
    let i = 8u * n + 2u * j + l0 / 16u;                               // sub-block
    let low = (read_u32(base + 96u + i % 8u) >> (4u * (i / 8u))) & 15u;
    let high = (read_u32(base + 104u + i % 4u) >> (2u * (i / 4u))) & 3u;
    let scale = read_f16(base + 108u) * (f32(low | (high << 4u)) - 32.0);
    let q = base + 32u + n * 32u + l0;
    let h = base + l0;
    return array<vec4<f32>, 2>(q3_quad(read_u32(q) >> (2u * j), read_u32(h) >> (4u * n + j)) * scale,
                               q3_quad(read_u32(q + 4u) >> (2u * j), read_u32(h + 4u) >> (4u * n + j)) * scale);
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Blocks of BLOCK = 32 weights, INTERLEAVED: block b is part c = b % 8 of super-block b / 8, the weights stored in
// word column c of the super-block (qs bytes n*32 + 4c .. +4 for n < 2 and hmask bytes 4c .. +4: weights n*128 +
// j*32 + 4c .. +4 for j < 4). Each block_dot adds the products of 32 distinct weights with their own inputs and the
// 8 parts of a super-block cover it exactly once, so a row's sum is the same as with contiguous blocks; but the
// lanes sharing a row (neighbouring b) now read neighbouring words of W and neighbouring vec4s of X, which on a GPU
// is several times faster than each lane reading a whole block of its own (measured on an H200). x is the vec4 index
// block b would have if it were contiguous (t*K/4 + b*8); block_dot reads xin over its whole super-block, from x -
// c*8 on.
const BLOCK: u32 = 32u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let c = b % 8u;
    let x0 = x - c * 8u;
    let base = row * ROW_BYTES + (b / 8u) * 110u;
    let hm = read_u32_even(base + 4u * c);             // hmask[4c ..]: bit 4n + j
    let s0 = read_u32_even(base + 96u);                // scale bytes 0..3
    let s1 = read_u32_even(base + 100u);               // 4..7
    let s2 = read_u32_even(base + 104u);               // 8..11
    let d = unpack2x16float(read_u32_even(base + 108u)).x;
    let pick = 8u * (c / 4u);          // weights 4c .. lie in the second 16-weight sub-block of each j when c >= 4
    var acc = 0.0;
    for (var n = 0u; n < 2u; n++) {
        let q = read_u32_even(base + 32u + 32u * n + 4u * c);  // qs[n*32 + 4c ..]: bits 2j, 2j+1
        // the scales (+32) of half n, one per byte: sc_a = sub-blocks 8n .. 8n+3, sc_b = 8n+4 .. 8n+7
        let sc_a = ((s0 >> (4u * n)) & 0x0F0F0F0Fu) | (((s2 >> (4u * n)) & 0x03030303u) << 4u);
        let sc_b = ((s1 >> (4u * n)) & 0x0F0F0F0Fu) | (((s2 >> (4u * n + 2u)) & 0x03030303u) << 4u);
        let xb = x0 + 32u * n + c;
        let hn = hm >> (4u * n);
        acc += (f32((sc_a >> pick) & 0xFFu) - 32.0) * dot(q3_quad(q, hn), xin(xb))
             + (f32((sc_a >> (16u + pick)) & 0xFFu) - 32.0) * dot(q3_quad(q >> 2u, hn >> 1u), xin(xb + 8u))
             + (f32((sc_b >> pick) & 0xFFu) - 32.0) * dot(q3_quad(q >> 4u, hn >> 2u), xin(xb + 16u))
             + (f32((sc_b >> (16u + pick)) & 0xFFu) - 32.0) * dot(q3_quad(q >> 6u, hn >> 3u), xin(xb + 24u));
    }
    return d * acc;
}
