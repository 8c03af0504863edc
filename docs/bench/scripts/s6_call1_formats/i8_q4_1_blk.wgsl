// EXPERIMENT: Q4_1 raw layout, item = one whole block (5 words).
alias WORD = u32;
const ROW_WORDS: u32 = K / 32u * 5u;
const ITEMS: u32 = K / 32u;
const NIB: u32 = 0x0F0F0F0Fu;

fn item_dot(row: u32, b: u32) -> f32 {
    let base = row * ROW_WORDS + b * 5u;
    let dm = unpack2x16float(W[base]);
    let q = vec4<u32>(W[base + 1u], W[base + 2u], W[base + 3u], W[base + 4u]);
    let x = b * 8u;
    let i = dot4I8Packed(q.x & NIB, qx[x]) + dot4I8Packed(q.y & NIB, qx[x + 1u])
          + dot4I8Packed(q.z & NIB, qx[x + 2u]) + dot4I8Packed(q.w & NIB, qx[x + 3u])
          + dot4I8Packed((q.x >> 4u) & NIB, qx[x + 4u]) + dot4I8Packed((q.y >> 4u) & NIB, qx[x + 5u])
          + dot4I8Packed((q.z >> 4u) & NIB, qx[x + 6u]) + dot4I8Packed((q.w >> 4u) & NIB, qx[x + 7u]);
    return xd[b] * dm.x * f32(i) + dm.y * xs[b];
}
