// Q4_0 weights: each row is K/32 blocks of 18 bytes {d: f16, qs: 16 bytes}; weight j is d * (q_j - 8), q_j the low
// nibble of qs[j] for j < 16, the high nibble of qs[j - 16] otherwise. Blocks are not word aligned: read_u32 shifts.
// Provides w8(row, oct): weights row[8*oct .. 8*oct+8].
const ROW_BYTES: u32 = K / 32u * 18u;

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let base = row * ROW_BYTES + (oct / 4u) * 18u;     // byte offset of the block
    let o = oct % 4u;
    let d = read_f16(base);
    let shift = (o / 2u) * 4u;
    let q0 = read_u32(base + 2u + (o % 2u) * 8u) >> shift;
    let q1 = read_u32(base + 6u + (o % 2u) * 8u) >> shift;
    let a = vec4<f32>(vec4<u32>(q0, q0 >> 8u, q0 >> 16u, q0 >> 24u) & vec4<u32>(15u)) - 8.0;
    let b = vec4<f32>(vec4<u32>(q1, q1 >> 8u, q1 >> 16u, q1 >> 24u) & vec4<u32>(15u)) - 8.0;
    return array<vec4<f32>, 2>(a * d, b * d);
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Items of BLOCK = 8 weights, INTERLEAVED as in q4_1.wgsl: item b is qs bytes 4c .. 4c+4 (c = b % 4) of block b / 4,
// weights 4c .. 4c+4 (low nibbles) and 16+4c .. (high); neighbouring lanes read neighbouring bytes of W.
// d * sum_j (q_j - 8) x_j.
const BLOCK: u32 = 8u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let c = b % 4u;
    let base = row * ROW_BYTES + (b / 4u) * 18u;
    let d = read_f16(base);
    let q = read_u32(base + 2u + 4u * c);
    let lo = vec4<f32>(vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) & vec4<u32>(15u)) - 8.0;
    let hi = vec4<f32>(vec4<u32>(q >> 4u, q >> 12u, q >> 20u, q >> 28u) & vec4<u32>(15u)) - 8.0;
    return d * (dot(lo, xin(x - c)) + dot(hi, xin(x + 4u - c)));
}
