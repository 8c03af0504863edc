// Q8_0 weights: each row is K/32 blocks of 34 bytes {d: f16, qs: 32 x int8}; weight j is d * qs[j].
// Blocks are not word aligned: read_u32 shifts. Provides w8(row, oct): weights row[8*oct .. 8*oct+8].
const ROW_BYTES: u32 = K / 32u * 34u;

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let base = row * ROW_BYTES + (oct / 4u) * 34u;
    let d = read_f16(base);
    let q0 = read_u32(base + 2u + (oct % 4u) * 8u);
    let q1 = read_u32(base + 6u + (oct % 4u) * 8u);
    return array<vec4<f32>, 2>(unpack_i8x4(q0) * d, unpack_i8x4(q1) * d);
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Items of BLOCK = 8 consecutive weights: item b is weights 8c .. 8c+8 (c = b % 4) of block b / 4, so neighbouring
// lanes read neighbouring bytes of W. d * sum_j qs_j x_j.
const BLOCK: u32 = 8u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let base = row * ROW_BYTES + (b / 4u) * 34u + 2u + (b % 4u) * 8u;    // even: rows and blocks are 34 bytes
    let d = read_f16(row * ROW_BYTES + (b / 4u) * 34u);
    return d * (dot(unpack_i8x4(read_u32_even(base)), xin(x)) + dot(unpack_i8x4(read_u32_even(base + 4u)), xin(x + 1u)));
}
