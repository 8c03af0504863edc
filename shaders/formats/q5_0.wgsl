// Q5_0 weights: each row is K/32 blocks of 22 bytes {d: f16, qh: u32, qs: 16 bytes}; weight j of a block is
// d * (q_j - 16) with q_j = (nibble j) | (bit j of qh) << 4, where nibble j is the low nibble of qs[j] for j < 16
// and the high nibble of qs[j - 16] otherwise. Blocks start on 2-byte boundaries: read_u32 (bytes.wgsl) shifts.
// Provides w8(row, oct): weights row[8*oct .. 8*oct+8].
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
// Dot product of block b of a row (32 weights) with xin(x .. x + 8) (vec4 index): d * sum_j (q_j - 16) x_j.
const BLOCK: u32 = 32u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let base = row * ROW_BYTES + b * 22u;
    // bytes 2..21 (qh, qs) are 5 words from the 2-byte aligned offset base + 2: read the 6 words under them once
    // and shift each pair into place (s = 0 or 16; the second term vanishes when s = 0)
    let a = (base + 2u) >> 2u;
    let s = ((base + 2u) & 2u) * 8u;
    var w: array<u32, 5>;
    var prev = W[a];
    for (var i = 0u; i < 5u; i++) {
        let next = W[a + 1u + i];
        w[i] = (prev >> s) | ((next << 1u) << (31u - s));
        prev = next;
    }
    let d = read_f16(base);
    let qh = w[0];
    var acc = 0.0;
    for (var j = 0u; j < 4u; j++) {
        let q = w[1u + j];                             // qs[4j .. 4j+4]: weights 4j.. (low) and 16+4j.. (high)
        acc += dot(q5_0_quad(q, qh >> (4u * j)), xin(x + j)) + dot(q5_0_quad(q >> 4u, qh >> (16u + 4u * j)), xin(x + 4u + j));
    }
    return d * acc;
}
