// Q5_K weights for matvec_q8.wgsl (layout in q5_k.wgsl: super-blocks of 256 weights in 176 bytes: d | dmin, 12 bytes
// of 6-bit scales and mins (as Q4_K), qh: 32 bytes of high bits, qs: 128 bytes of nibbles; weight j*64 + h*32 + l is
// d * sc[2j+h] * q - dmin * mn[2j+h], q = nibble h of qs[j*32 + l] | bit 2j+h of qh[l] << 4). 176 bytes are 11
// vec4<u32>: item b is qs bytes 16m .. 16m+16 (m = b % 8) of super-block b / 8 (vec4 3 + m) with qh bytes
// 16(m%2) .. +16 (vec4 1 + m%2), besides the header vec4, as in formats_matvec_q8/q4_k.wgsl: values 0..31 as int8 (kquant_item).
alias WORD = vec4<u32>;
const ROW_VEC4: u32 = K / 256u * 11u;
const ITEMS: u32 = K / 32u;
const NIB: vec4<u32> = vec4<u32>(0x0F0F0F0Fu);
const BIT: vec4<u32> = vec4<u32>(0x01010101u);

fn item_dot(row: u32, b: u32) -> f32 {
    let m = b % 8u;
    let sb = b / 8u;
    let base = row * ROW_VEC4 + sb * 11u;
    let q = W[base + 3u + m];
    let qh = W[base + 1u + m % 2u];
    let s = vec4<u32>(2u * (m / 2u));  // bit 2j of qh for sub-block 2j, bit 2j + 1 for 2j + 1
    let lo = (q & NIB) | (((qh >> s) & BIT) << vec4<u32>(4u));
    let hi = ((q >> vec4<u32>(4u)) & NIB) | (((qh >> (s + vec4<u32>(1u))) & BIT) << vec4<u32>(4u));
    return kquant_item(W[base], lo, hi, sb, m);
}
