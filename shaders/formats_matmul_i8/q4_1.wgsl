// Q4_1 weights as int8 blocks for matmul_i8.wgsl: a 20-byte block {d: f16, m: f16, qs: 16 bytes} holds weight
// j = d * q_j + m, q_j the low nibble of qs[j] (j < 16) or the high nibble of qs[j - 16]: word w of the block's int8
// weights is qs word w's low nibbles (w < 4) or qs word w - 4's high nibbles. Blocks are word aligned.
alias WORD = u32;                 // W is array<u32>
const SCALES: u32 = 1u;  // scales a 32-block (d0, d1 differ only with 2)
const OFFSET: bool = true;  // whether blocks have an offset m
const ROW_WORDS: u32 = K / 32u * 5u;

fn wblock(row: u32, b: u32) -> WBlock {
    let base = row * ROW_WORDS + b * 5u;
    let dm = unpack2x16float(W[base]);
    let q = vec4<u32>(W[base + 1u], W[base + 2u], W[base + 3u], W[base + 4u]);
    return WBlock(q & vec4<u32>(0x0F0F0F0Fu), (q >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu), vec2<f32>(dm.x), dm.y);
}
