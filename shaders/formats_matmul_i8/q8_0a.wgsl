// Q8_0 weights in the aligned layout (formats/q8_0a.wgsl says where each field is) as int8 blocks for matmul_i8.wgsl:
// block i = row * K/32 + b has its 32 int8 in vec4s 2i, 2i + 1 and its f16 scale in half i % 2 of word i / 2 of the
// scales, which start at vec4 WROWS K / 16.
alias WORD = vec4<u32>;
const SCALES: u32 = 1u;  // scales a 32-block (d0, d1 differ only with 2)
const OFFSET: bool = false;  // whether blocks have an offset m
const SC4: u32 = WROWS * (K / 16u);

fn wblock(row: u32, b: u32) -> WBlock {
    let i = row * (K / 32u) + b;
    let h = i / 2u;
    let d = unpack2x16float(W[SC4 + h / 4u][h % 4u])[i % 2u];
    return WBlock(W[2u * i], W[2u * i + 1u], vec2<f32>(d), 0.0);
}
