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
