// Q6_K weights in the aligned layout (formats/q6_ka.wgsl says where each field is) as int8 blocks for matmul_i8.wgsl:
// the blocks of formats_matmul_i8/q6_k.wgsl (32-block b is (n, k) = ((b % 8) / 4, b % 4) of super-block b / 8, its words
// q - 32, its two scales d * sc[n*8 + 2k], d * sc[n*8 + 2k + 1]). W is read as array<vec4<u32>> (the aligned buffer
// is a multiple of 16 bytes): a block's ql bytes are 2 vec4s, its qh bytes 2 more, its scales one word of the
// super-block's scale vec4 and d a half of one word.
alias WORD = vec4<u32>;           // W is array<vec4<u32>>
const SCALES: u32 = 2u;  // scales a 32-block (d0, d1 differ only with 2)
const OFFSET: bool = false;  // whether blocks have an offset m
const NBK: u32 = K / 256u;
const SC4: u32 = WROWS * NBK * 12u;        // the first scale vec4 (super-block i's at SC4 + i)
const D4W: u32 = SC4 + WROWS * NBK;        // the first d vec4 (super-block i's d: half i % 2 of word i / 2)

// 16 6-bit values of sub-block k from 4 ql words l and 4 qh words h, as int8 q - 32.
fn q6a_words(l: vec4<u32>, h: vec4<u32>, k: u32) -> vec4<u32> {
    let v = ((l >> vec4<u32>(4u * (k / 2u))) & vec4<u32>(0x0F0F0F0Fu))
          | (((h >> vec4<u32>(2u * k)) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
    return sub_bias(v, 32u);
}

fn wblock(row: u32, b: u32) -> WBlock {
    let i = row * NBK + b / 8u;
    let n = (b % 8u) / 4u;
    let k = b % 4u;
    let ql = 12u * i + n * 4u + (k % 2u) * 2u;                       // vec4 of ql word 16n + 8(k % 2)
    let qh = 12u * i + 8u + n * 2u;                                  // of qh word 8n
    let d = unpack2x16float(W[D4W + i / 8u][(i / 2u) % 4u])[i % 2u];
    let s2 = n * 8u + 2u * k;                                        // sc[s2], sc[s2 + 1]: one half word
    let sc = (W[SC4 + i][s2 / 4u] >> (8u * (s2 % 4u))) & 0xFFFFu;
    let s = vec2<f32>(f32(bitcast<i32>(sc << 24u) >> 24u), f32(bitcast<i32>(sc << 16u) >> 24u));
    return WBlock(q6a_words(W[ql], W[qh], k), q6a_words(W[ql + 1u], W[qh + 1u], k), d * s, 0.0);
}
