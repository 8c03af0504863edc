// Q5_0 weights for matvec_q8.wgsl: each row is K/32 blocks of 22 bytes {d: f16, qh: u32, qs: 16 bytes}; weight j is
// d * (q_j - 16), q_j = (nibble j) | (bit j of qh) << 4, nibble j the low nibble of qs[j] (j < 16) or the high
// nibble of qs[j - 16]. Item b is qs bytes 4c .. 4c+4 (c = b % 4) of block b / 4: weights 4c .. +4 (low nibbles,
// qh bits 4c ..) and 16+4c .. +4 (high, qh bits 16+4c ..). 5-bit values 0..31 as int8, the -16 offset taken off
// with the inputs' sum. Blocks start on 2-byte boundaries: read_u32_even (bytes.wgsl).
alias WORD = u32;                 // W is array<u32>
const ROW_BYTES: u32 = K / 32u * 22u;
const ITEMS: u32 = K / 8u;

// Bits 0..3 of h to bit 4 of bytes 0..3.
fn q5_bits(h: u32) -> u32 {
    return ((h & 1u) << 4u) | ((h & 2u) << 11u) | ((h & 4u) << 18u) | ((h & 8u) << 25u);
}

fn item_dot(row: u32, b: u32) -> f32 {
    let c = b % 4u;
    let blk = b / 4u;
    let base = row * ROW_BYTES + blk * 22u;
    let qh = read_u32_even(base + 2u);
    let q = read_u32_even(base + 6u + 4u * c);
    let xa = qx[blk * 8u + c];
    let xb = qx[blk * 8u + 4u + c];
    let i = dot4I8Packed((q & 0x0F0F0F0Fu) | q5_bits(qh >> (4u * c)), xa)
          + dot4I8Packed(((q >> 4u) & 0x0F0F0F0Fu) | q5_bits(qh >> (16u + 4u * c)), xb)
          - 16 * (dot4I8Packed(0x01010101u, xa) + dot4I8Packed(0x01010101u, xb));
    return read_f16(base) * xd[blk] * f32(i);
}
