// The Q6_K item product of matvec_q8.wgsl for formats_matvec_q8/q6_k.wgsl (the file's layout; the aligned one, formats_matvec_q8/q6_ka.wgsl, reads
// whole vec4s instead), which reads the words: for half n of super-block sb and word column c, l0 / l1 the ql words
// (k = 0, 2 and k = 1, 3), h the qh word, sa / sc the scale words of k = 0, 1 and k = 2, 3 (pick: which of a word's
// two scales is this column's). 6-bit values 0..63 as int8; the -32 offset is taken off with the inputs' sum.

// (q - 32) · qx[w] for the four 6-bit values of the low nibbles of l and bits 0..1 of h's bytes.
fn q6_dot8(l: u32, h: u32, w: u32) -> i32 {
    let x = qx[w];
    return dot4I8Packed((l & 0x0F0F0F0Fu) | ((h & 0x03030303u) << 4u), x) - 32 * dot4I8Packed(0x01010101u, x);
}

// The half's products for column c of super-block sb, scaled by the activation blocks' dx (not by d).
fn q6_half(l0: u32, l1: u32, h: u32, sa: u32, sc: u32, sb: u32, n: u32, c: u32) -> f32 {
    let pick = c / 4u;
    let w = sb * 64u + 32u * n + c;                           // qx word of inputs n*128 + 4c
    let x = sb * 8u + 4u * n;                                 // activation block of k = 0
    return xd[x] * f32(signed_byte(sa, pick) * q6_dot8(l0, h, w))
         + xd[x + 1u] * f32(signed_byte(sa, 2u + pick) * q6_dot8(l1, h >> 2u, w + 8u))
         + xd[x + 2u] * f32(signed_byte(sc, pick) * q6_dot8(l0 >> 4u, h >> 4u, w + 16u))
         + xd[x + 3u] * f32(signed_byte(sc, 2u + pick) * q6_dot8(l1 >> 4u, h >> 6u, w + 24u));
}
