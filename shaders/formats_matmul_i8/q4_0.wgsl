// Q4_0 weights as int8 blocks for matmul_i8.wgsl: an 18-byte block {d: f16, qs: 16 bytes} holds weight
// j = d * (q_j - 8), q_j the low nibble of qs[j] (j < 16) or the high nibble of qs[j - 16]; the int8 words are those
// nibbles minus 8 (sub_bias). Blocks start on 2-byte boundaries (read_u32_even, bytes.wgsl).
alias WORD = u32;                 // W is array<u32>
const SCALES: u32 = 1u;  // scales a 32-block (d0, d1 differ only with 2)
const OFFSET: bool = false;  // whether blocks have an offset m
const ROW_BYTES: u32 = K / 32u * 18u;

fn wblock(row: u32, b: u32) -> WBlock {
    let base = row * ROW_BYTES + b * 18u;
    let d = read_f16(base);
    let q = vec4<u32>(read_u32_even(base + 2u), read_u32_even(base + 6u), read_u32_even(base + 10u),
                      read_u32_even(base + 14u));
    return WBlock(sub_bias(q & vec4<u32>(0x0F0F0F0Fu), 8u), sub_bias((q >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu), 8u),
                  vec2<f32>(d), 0.0);
}
