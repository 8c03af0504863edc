// Q4_0 weights for matvec_q8.wgsl: each row is K/32 blocks of 18 bytes {d: f16, qs: 16 bytes}; weight j is
// d * (q_j - 8), q_j the low nibble of qs[j] (j < 16) or the high nibble of qs[j - 16]. Item b is qs bytes
// 4c .. 4c+4 (c = b % 4) of block b / 4: weights 4c .. +4 (low nibbles) and 16+4c .. +4 (high). Nibbles 0..15 as
// int8, the -8 offset taken off with the inputs' sum. Blocks start on 2-byte boundaries: read_u32_even (bytes.wgsl).
alias WORD = u32;                 // W is array<u32>
const ROW_BYTES: u32 = K / 32u * 18u;
const ITEMS: u32 = K / 8u;

fn item_dot(row: u32, b: u32) -> f32 {
    let c = b % 4u;
    let blk = b / 4u;
    let base = row * ROW_BYTES + blk * 18u;
    let q = read_u32_even(base + 2u + 4u * c);
    let xa = qx[blk * 8u + c];
    let xb = qx[blk * 8u + 4u + c];
    let i = dot4I8Packed(q & 0x0F0F0F0Fu, xa) + dot4I8Packed((q >> 4u) & 0x0F0F0F0Fu, xb)
          - 8 * (dot4I8Packed(0x01010101u, xa) + dot4I8Packed(0x01010101u, xb));
    return read_f16(base) * xd[blk] * f32(i);
}
