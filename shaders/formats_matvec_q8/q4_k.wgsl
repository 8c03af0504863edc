// Q4_K weights for matvec_q8.wgsl (layout in q4_k.wgsl: super-blocks of 256 weights in 144 bytes: d | dmin, 12 bytes
// of 6-bit scales sc[s] and mins mn[s] (see kscales.wgsl), 128 bytes of nibbles; weight j*64 + h*32 + l is
// d * sc[2j+h] * q - dmin * mn[2j+h], q nibble h of qs[j*32 + l]). 144 bytes are 9 vec4<u32>, so this format reads
// W as array<vec4<u32>> (WORD): item b is qs bytes 16m .. 16m+16 (m = b % 8) of super-block b / 8, one 16-byte
// load (neighbouring lanes read neighbouring vec4s), plus the super-block's header vec4 (shared by its 8 items).
// Those bytes hold weights 64j + 16(m%2) .. +16 (low nibbles, sub-block 2j) and the same + 32 (high, sub-block
// 2j + 1), j = m / 2. Sub-blocks are the activation's 32-blocks, so each has its own dx:
// d * sum_s dx_s sc_s (q · qx) - dmin * sum_s dx_s mn_s sum(qx) (kquant_item, formats_matvec_q8/kquant.wgsl).
alias WORD = vec4<u32>;
const ROW_VEC4: u32 = K / 256u * 9u;
const ITEMS: u32 = K / 32u;
const NIB: vec4<u32> = vec4<u32>(0x0F0F0F0Fu);

fn item_dot(row: u32, b: u32) -> f32 {
    let m = b % 8u;
    let sb = b / 8u;
    let base = row * ROW_VEC4 + sb * 9u;
    let q = W[base + 1u + m];
    return kquant_item(W[base], q & NIB, (q >> vec4<u32>(4u)) & NIB, sb, m);
}
