// Q6_K weights in the aligned layout (formats/q6_ka.wgsl says where each field is) as int8 blocks for matmul_i8.wgsl:
// the blocks of formats_i8/q6_k.wgsl (32-block b is (n, k) = ((b % 8) / 4, b % 4) of super-block b / 8, its words
// q - 32, its two scales d * sc[n*8 + 2k], d * sc[n*8 + 2k + 1]), every word read whole.
alias WORD = u32;                 // W is array<u32>
const SCALES: u32 = 2u;  // scales a 32-block (d0, d1 differ only with 2)
const OFFSET: bool = false;  // whether blocks have an offset m
const NBK: u32 = K / 256u;
const SCW: u32 = WROWS * NBK * 48u;
const DW: u32 = SCW + WROWS * NBK * 4u;

// Words w .. w + 4 of ql (from word ql) and of qh (from qh), as int8 q - 32 for sub-block k.
fn q6a_words(ql: u32, qh: u32, k: u32) -> vec4<u32> {
    let l = vec4<u32>(W[ql], W[ql + 1u], W[ql + 2u], W[ql + 3u]);
    let h = vec4<u32>(W[qh], W[qh + 1u], W[qh + 2u], W[qh + 3u]);
    let v = ((l >> vec4<u32>(4u * (k / 2u))) & vec4<u32>(0x0F0F0F0Fu))
          | (((h >> vec4<u32>(2u * k)) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
    return sub_bias(v, 32u);
}

fn wblock(row: u32, b: u32) -> WBlock {
    let i = row * NBK + b / 8u;
    let n = (b % 8u) / 4u;
    let k = b % 4u;
    let ql = 48u * i + n * 16u + (k % 2u) * 8u;
    let qh = 48u * i + 32u + n * 8u;
    let d = unpack2x16float(W[DW + i / 2u])[i % 2u];
    let s2 = n * 8u + 2u * k;                                         // sc[s2], sc[s2 + 1]: one half word
    let sc = (W[SCW + 4u * i + s2 / 4u] >> (8u * (s2 % 4u))) & 0xFFFFu;
    let s = vec2<f32>(f32(bitcast<i32>(sc << 24u) >> 24u), f32(bitcast<i32>(sc << 16u) >> 24u));
    return WBlock(q6a_words(ql, qh, k), q6a_words(ql + 4u, qh + 4u, k), d * s, 0.0);
}
