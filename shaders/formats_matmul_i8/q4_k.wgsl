// Q4_K weights as int8 blocks for matmul_i8.wgsl: a 144-byte super-block (9 vec4<u32>: d | dmin and 12 bytes of
// 6-bit scales and mins, then 128 bytes qs) holds 8 sub-blocks of 32; weight l of sub-block s = 2j + h is
// d * sc[s] * q - dmin * mn[s], q nibble h of qs[32j + l]. So 32-block b is sub-block b % 8 of super-block b / 8,
// its int8 words nibble h of qs vec4s 2j, 2j + 1 (one 16-byte load each: rows are whole super-blocks, so every
// super-block starts on 16 bytes), its scale d * sc[s] and offset -dmin * mn[s]. Needs kscales.wgsl.
alias WORD = vec4<u32>;           // W is array<vec4<u32>>
const SCALES: u32 = 1u;  // scales a 32-block (d0, d1 differ only with 2)
const OFFSET: bool = true;  // whether blocks have an offset m
const ROW_VEC4: u32 = K / 256u * 9u;

fn wblock(row: u32, b: u32) -> WBlock {
    let base = row * ROW_VEC4 + (b / 8u) * 9u;
    let s = b % 8u;
    let h = W[base];                                   // d | dmin, then the scales' 3 words
    let q = base + 1u + 2u * (s / 2u);
    let shift = vec4<u32>(4u * (s % 2u));
    let m = vec4<u32>(0x0F0F0F0Fu);
    let dm = unpack2x16float(h.x);
    let sm = k4_scale_min(k4_scales(h.y, h.z, h.w), s);
    return WBlock((W[q] >> shift) & m, (W[q + 1u] >> shift) & m, vec2<f32>(dm.x * sm.x), -dm.y * sm.y);
}
