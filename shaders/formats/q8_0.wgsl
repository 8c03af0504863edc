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
// Dot product of block b of a row (32 weights) with X[x .. x + 8] (vec4 index): d * sum_j qs_j x_j.
const BLOCK: u32 = 32u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let base = row * ROW_BYTES + b * 34u;
    let d = read_f16(base);
    var s = 0.0;
    for (var j = 0u; j < 8u; j++) {
        s += dot(unpack_i8x4(read_u32(base + 2u + 4u * j)), xin(x + j));
    }
    return d * s;
}
