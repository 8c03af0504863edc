// Q4_K weights as int8 blocks for matmul_i8.wgsl: a 144-byte super-block (36 words: d | dmin, 12 bytes of 6-bit
// scales and mins, 128 bytes qs) holds 8 sub-blocks of 32; weight l of sub-block s = 2j + h is
// d * sc[s] * q - dmin * mn[s], q nibble h of qs[32j + l]. So 32-block b is sub-block b % 8 of super-block b / 8,
// its int8 words nibble h of qs words 8j .. 8j + 8, its scale d * sc[s] and offset -dmin * mn[s]. Needs kscales.wgsl.
alias WORD = u32;                 // W is array<u32>
const SCALES: u32 = 1u;  // scales a 32-block (d0, d1 differ only with 2)
const OFFSET: bool = true;  // whether blocks have an offset m
const ROW_WORDS: u32 = K / 256u * 36u;

fn wblock(row: u32, b: u32) -> WBlock {
    let base = row * ROW_WORDS + (b / 8u) * 36u;
    let s = b % 8u;
    let q = base + 4u + 8u * (s / 2u);
    let shift = vec4<u32>(4u * (s % 2u));
    let m = vec4<u32>(0x0F0F0F0Fu);
    let dm = unpack2x16float(W[base]);
    let sm = k4_scale_min(k4_scales(W[base + 1u], W[base + 2u], W[base + 3u]), s);
    return WBlock((vec4<u32>(W[q], W[q + 1u], W[q + 2u], W[q + 3u]) >> shift) & m,
                  (vec4<u32>(W[q + 4u], W[q + 5u], W[q + 6u], W[q + 7u]) >> shift) & m,
                  vec2<f32>(dm.x * sm.x), -dm.y * sm.y);
}
