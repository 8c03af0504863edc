// Q8_0 weights for matvec_q8.wgsl: each row is K/32 blocks of 34 bytes {d: f16, qs: 32 x int8} (weight j is
// d * qs[j]). Item b is qs bytes 8c .. 8c+8 (c = b % 4) of block b / 4: neighbouring lanes read neighbouring bytes.
// Blocks start on 2-byte boundaries: the item's 8 bytes are shifted out of three words. Needs bytes.wgsl (read_f16).
alias WORD = u32;                 // W is array<u32>
const ROW_BYTES: u32 = K / 32u * 34u;
const ITEMS: u32 = K / 8u;

fn item_dot(row: u32, b: u32) -> f32 {
    let base = row * ROW_BYTES + (b / 4u) * 34u;
    let off = base + 2u + (b % 4u) * 8u;
    let w = off >> 2u;
    let s = (off & 2u) * 8u;                      // 0 or 16; the second terms vanish when s = 0
    let w1 = W[w + 1u];
    let q0 = (W[w] >> s) | ((w1 << 1u) << (31u - s));
    let q1 = (w1 >> s) | ((W[w + 2u] << 1u) << (31u - s));
    let i = dot4I8Packed(q0, qx[2u * b]) + dot4I8Packed(q1, qx[2u * b + 1u]);
    return read_f16(base) * xd[b / 4u] * f32(i);
}
