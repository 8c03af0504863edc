// Q6_K weights as int8 blocks for matmul_i8.wgsl (NH = 2: a scale per 16 weights): a 210-byte super-block
// {ql: 128 bytes, qh: 64, sc: 16 x int8, d: f16} holds weight n*128 + k*32 + l (n < 2, k < 4, l < 32)
// d * sc[n*8 + 2k + l/16] * (q - 32), q = (nibble k/2 of ql[n*64 + (k%2)*32 + l]) | ((qh[n*32 + l] >> 2k) & 3) << 4.
// So 32-block b is (n, k) = ((b % 8) / 4, b % 4) of super-block b / 8; its int8 words are q - 32 (sub_bias), its two
// scales d * sc[n*8 + 2k] and d * sc[n*8 + 2k + 1]. Super-blocks start on 2-byte boundaries (bytes.wgsl).
alias WORD = u32;                 // W is array<u32>
const SCALES: u32 = 2u;  // scales a 32-block (d0, d1 differ only with 2)
const OFFSET: bool = false;  // whether blocks have an offset m
const ROW_BYTES: u32 = K / 256u * 210u;

fn q6_words(ql: u32, qh: u32, k: u32) -> vec4<u32> {
    let l = vec4<u32>(read_u32_even(ql), read_u32_even(ql + 4u), read_u32_even(ql + 8u), read_u32_even(ql + 12u));
    let h = vec4<u32>(read_u32_even(qh), read_u32_even(qh + 4u), read_u32_even(qh + 8u), read_u32_even(qh + 12u));
    let v = ((l >> vec4<u32>(4u * (k / 2u))) & vec4<u32>(0x0F0F0F0Fu))
          | (((h >> vec4<u32>(2u * k)) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
    return sub_bias(v, 32u);
}

fn wblock(row: u32, b: u32) -> WBlock {
    let base = row * ROW_BYTES + (b / 8u) * 210u;
    let n = (b % 8u) / 4u;
    let k = b % 4u;
    let ql = base + n * 64u + (k % 2u) * 32u;
    let qh = base + 128u + n * 32u;
    let d = read_f16(base + 208u);
    let sc = read_u32_even(base + 192u + n * 8u + 2u * k) & 0xFFFFu;     // sc[n*8 + 2k], sc[n*8 + 2k + 1]
    let s = vec2<f32>(f32(bitcast<i32>(sc << 24u) >> 24u), f32(bitcast<i32>(sc << 16u) >> 24u));
    return WBlock(q6_words(ql, qh, k), q6_words(ql + 16u, qh + 16u, k), d * s, 0.0);
}
