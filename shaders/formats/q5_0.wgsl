// Q5_0 weights: each row is K/32 blocks of 22 bytes {d: f16, qh: u32, qs: 16 bytes}; weight j of a block is
// d * (q_j - 16) with q_j = (nibble j) | (bit j of qh) << 4, where nibble j is the low nibble of qs[j] for j < 16
// and the high nibble of qs[j - 16] otherwise. Blocks start on 2-byte boundaries: read_u32 and read_u32_even
// (bytes.wgsl) shift. Provides w8(row, oct): weights row[8*oct .. 8*oct+8].
const ROW_BYTES: u32 = K / 32u * 22u;

// Four 5-bit values minus 16: the nibbles of the bytes of q (already shifted to the wanted nibble), bits 0..3 of h.
fn q5_0_quad(q: u32, h: u32) -> vec4<f32> {
    let lo = vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) & vec4<u32>(15u);
    let hi = (vec4<u32>(h) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u);
    return vec4<f32>(lo | (hi << vec4<u32>(4u))) - 16.0;
}

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let base = row * ROW_BYTES + (oct / 4u) * 22u;     // byte offset of the block
    let o = oct % 4u;                                  // weights 8o .. 8o+8 of the block
    let d = read_f16(base);
    let h = read_u32(base + 2u) >> (8u * o);
    let shift = (o / 2u) * 4u;                         // octets 0,1: low nibbles; 2,3: high nibbles
    let q0 = read_u32(base + 6u + (o % 2u) * 8u) >> shift;
    let q1 = read_u32(base + 10u + (o % 2u) * 8u) >> shift;
    return array<vec4<f32>, 2>(q5_0_quad(q0, h) * d, q5_0_quad(q1, h >> 4u) * d);
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Blocks of BLOCK = 8 weights, INTERLEAVED: block b is part p = b % 4 of GGML block b / 4, the weights of its qs
// word p: 4p .. 4p+4 (low nibbles) and 16+4p .. 16+4p+4 (high nibbles). Each block_dot adds the products of 8
// distinct weights with their own inputs and the 4 parts cover the GGML block exactly once, so a row's sum is the
// same as with contiguous blocks; but the lanes sharing a row (neighbouring b) read neighbouring words of W and
// vec4s of X, which on a GPU is several times faster than each lane reading a whole 32-weight block of its own.
// x is the vec4 index block b would have if it were contiguous (t*K/4 + 2b); block_dot reads xin over its whole
// GGML block, from x - 2p on.
const BLOCK: u32 = 8u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let p = b % 4u;
    let x0 = x - 2u * p;
    let base = row * ROW_BYTES + (b / 4u) * 22u;
    let d = unpack2x16float(read_u32_even(base)).x;
    let qh = read_u32_even(base + 2u);
    let q = read_u32_even(base + 6u + 4u * p);         // qs[4p .. 4p+4]
    return d * (dot(q5_0_quad(q, qh >> (4u * p)), xin(x0 + p))
              + dot(q5_0_quad(q >> 4u, qh >> (16u + 4u * p)), xin(x0 + 4u + p)));
}
