// Q5_1 weights: each row is K/32 blocks of 24 bytes {d: f16, m: f16, qh: u32, qs: 16 bytes}; weight j of a block
// is d * q_j + m with q_j = (nibble j) | (bit j of qh) << 4, where nibble j is the low nibble of qs[j] for j < 16
// and the high nibble of qs[j - 16] otherwise. Blocks are 6 words: word 0 = d | m << 16, word 1 = qh,
// words 2..5 = qs. Provides w8(row, oct): weights row[8*oct .. 8*oct+8].
const ROW_WORDS: u32 = K / 32u * 6u;

// Four 5-bit values: the nibbles of the bytes of q (already shifted to the wanted nibble) and bits 0..3 of h.
fn q5_1_quad(q: u32, h: u32) -> vec4<f32> {
    let lo = vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) & vec4<u32>(15u);
    let hi = (vec4<u32>(h) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u);
    return vec4<f32>(lo | (hi << vec4<u32>(4u)));
}

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let base = row * ROW_WORDS + (oct / 4u) * 6u;
    let o = oct % 4u;                                  // weights 8o .. 8o+8 of the block
    let dm = unpack2x16float(W[base]);
    let h = W[base + 1u] >> (8u * o);
    let shift = (o / 2u) * 4u;                         // octets 0,1: low nibbles; 2,3: high nibbles
    let q0 = W[base + 2u + (o % 2u) * 2u] >> shift;
    let q1 = W[base + 3u + (o % 2u) * 2u] >> shift;
    return array<vec4<f32>, 2>(q5_1_quad(q0, h) * dm.x + dm.y, q5_1_quad(q1, h >> 4u) * dm.x + dm.y);
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
    let base = row * ROW_WORDS + (b / 4u) * 6u;
    let dm = unpack2x16float(W[base]);
    let qh = W[base + 1u];
    let q = W[base + 2u + p];                          // qs[4p .. 4p+4]
    let xl = xin(x0 + p);
    let xh = xin(x0 + 4u + p);
    let s = dot(q5_1_quad(q, qh >> (4u * p)), xl) + dot(q5_1_quad(q >> 4u, qh >> (16u + 4u * p)), xh);
    return dm.x * s + dm.y * dot(xl + xh, vec4<f32>(1.0));
}
