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
// Dot product of block b of a row (32 weights) with xin(x .. x + 8) (vec4 index):
// sum_j (d q_j + m) x_j = d * sum_j q_j x_j + m * sum_j x_j.
const BLOCK: u32 = 32u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let base = row * ROW_WORDS + b * 6u;
    let dm = unpack2x16float(W[base]);
    let qh = W[base + 1u];
    var s = 0.0;
    var xs = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        let q = W[base + 2u + j];                      // qs[4j .. 4j+4]: weights 4j.. (low) and 16+4j.. (high)
        let xl = xin(x + j);
        let xh = xin(x + 4u + j);
        s += dot(q5_1_quad(q, qh >> (4u * j)), xl) + dot(q5_1_quad(q >> 4u, qh >> (16u + 4u * j)), xh);
        xs += xl + xh;
    }
    return dm.x * s + dm.y * (xs.x + xs.y + xs.z + xs.w);
}
