// Q5_0 weights as int8 blocks for matmul_i8.wgsl: a 22-byte block {d: f16, qh: u32, qs: 16 bytes} holds weight
// j = d * (q_j - 16), q_j = nibble j | (bit j of qh) << 4 (nibble j: the low nibble of qs[j] for j < 16, the high
// nibble of qs[j - 16] otherwise); the int8 words are q_j - 16 (sub_bias). Blocks start on 2-byte boundaries.
alias WORD = u32;                 // W is array<u32>
const SCALES: u32 = 1u;  // scales a 32-block (d0, d1 differ only with 2)
const OFFSET: bool = false;  // whether blocks have an offset m
const ROW_BYTES: u32 = K / 32u * 22u;

// Bits 0..3 of h as bit 4 of bytes 0..3.
fn q5_high4(h: u32) -> u32 {
    return ((h & 1u) | ((h & 2u) << 7u) | ((h & 4u) << 14u) | ((h & 8u) << 21u)) << 4u;
}

fn wblock(row: u32, b: u32) -> WBlock {
    let base = row * ROW_BYTES + b * 22u;
    let d = read_f16(base);
    let qh = read_u32_even(base + 2u);
    let q = vec4<u32>(read_u32_even(base + 6u), read_u32_even(base + 10u), read_u32_even(base + 14u),
                      read_u32_even(base + 18u));
    let h0 = vec4<u32>(q5_high4(qh), q5_high4(qh >> 4u), q5_high4(qh >> 8u), q5_high4(qh >> 12u));
    let h1 = vec4<u32>(q5_high4(qh >> 16u), q5_high4(qh >> 20u), q5_high4(qh >> 24u), q5_high4(qh >> 28u));
    return WBlock(sub_bias((q & vec4<u32>(0x0F0F0F0Fu)) | h0, 16u),
                  sub_bias(((q >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu)) | h1, 16u), vec2<f32>(d), 0.0);
}
