// Q4_1 weights in the aligned layout (formats/q4_1a.wgsl says where each field is) as int8 blocks for matmul_i8.wgsl:
// block i = row * K/32 + b has its 16 integer bytes in vec4 i (low nibbles: weights 0 .. 16, high: 16 .. 32) and
// its (d, m) in word i of the scales, which start at vec4 WROWS K / 32. Weight = d * nibble + m.
alias WORD = vec4<u32>;
const SCALES: u32 = 1u;  // scales a 32-block (d0, d1 differ only with 2)
const OFFSET: bool = true;  // whether blocks have an offset m
const SC4: u32 = WROWS * (K / 32u);

fn wblock(row: u32, b: u32) -> WBlock {
    let i = row * (K / 32u) + b;
    let q = W[i];
    let dm = unpack2x16float(W[SC4 + i / 4u][i % 4u]);
    return WBlock(q & vec4<u32>(0x0F0F0F0Fu), (q >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu), vec2<f32>(dm.x), dm.y);
}
