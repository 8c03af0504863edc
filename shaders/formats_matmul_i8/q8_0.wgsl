// Q8_0 weights as int8 blocks for matmul_i8.wgsl: a 34-byte block {d: f16, qs: 32 x int8} holds weight
// j = d * qs[j]; the int8 words are qs as they are. Blocks start on 2-byte boundaries (read_u32_even, bytes.wgsl).
alias WORD = u32;                 // W is array<u32>
const SCALES: u32 = 1u;  // scales a 32-block (d0, d1 differ only with 2)
const OFFSET: bool = false;  // whether blocks have an offset m
const ROW_BYTES: u32 = K / 32u * 34u;

fn wblock(row: u32, b: u32) -> WBlock {
    let base = row * ROW_BYTES + b * 34u;
    let d = read_f16(base);
    let q = base + 2u;
    return WBlock(vec4<u32>(read_u32_even(q), read_u32_even(q + 4u), read_u32_even(q + 8u), read_u32_even(q + 12u)),
                  vec4<u32>(read_u32_even(q + 16u), read_u32_even(q + 20u), read_u32_even(q + 24u),
                            read_u32_even(q + 28u)),
                  vec2<f32>(d), 0.0);
}
