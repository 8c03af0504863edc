// Q4_1 weights for matvec_q8.wgsl: each row is K/32 blocks of 20 bytes (5 words) {d: f16, m: f16, qs: 16 bytes};
// weight j is d * q_j + m, q_j the low nibble of qs[j] (j < 16) or the high nibble of qs[j - 16]. Item b is qs word
// c = b % 4 of block b / 4: weights 4c .. 4c+4 (low nibbles) and 16+4c .. 16+4c+4 (high); neighbouring lanes read
// neighbouring words. sum_j (d q_j + m) x_j = dx * (d * sum_j q_j qx_j + m * sum_j qx_j), nibbles 0..15 as int8.
alias WORD = u32;                 // W is array<u32>
const ROW_WORDS: u32 = K / 32u * 5u;
const ITEMS: u32 = K / 8u;

fn item_dot(row: u32, b: u32) -> f32 {
    let c = b % 4u;
    let blk = b / 4u;
    let base = row * ROW_WORDS + blk * 5u;
    let dm = unpack2x16float(W[base]);
    let q = W[base + 1u + c];
    let xa = qx[blk * 8u + c];
    let xb = qx[blk * 8u + 4u + c];
    let i = dot4I8Packed(q & 0x0F0F0F0Fu, xa) + dot4I8Packed((q >> 4u) & 0x0F0F0F0Fu, xb);
    let sx = dot4I8Packed(0x01010101u, xa) + dot4I8Packed(0x01010101u, xb);
    return xd[blk] * (dm.x * f32(i) + dm.y * f32(sx));
}
