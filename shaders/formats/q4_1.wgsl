// Q4_1 weights: each row is K/32 blocks of 20 bytes {d: f16, m: f16, qs: 16 bytes}; weight j of a block is
// d * q_j + m, with q_j the low nibble of qs[j] for j < 16 and the high nibble of qs[j - 16] otherwise.
// Blocks are 20 bytes, so every block starts on a word. Provides w8(row, oct): weights row[8*oct .. 8*oct+8].
const ROW_WORDS: u32 = K / 32u * 5u;

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let base = row * ROW_WORDS + (oct / 4u) * 5u;
    let o = oct % 4u;
    let dm = unpack2x16float(W[base]);
    let shift = (o / 2u) * 4u;                    // octets 0,1: low nibbles; 2,3: high nibbles
    let q0 = W[base + 1u + (o % 2u) * 2u] >> shift;   // qs[8*(o%2) .. +4]
    let q1 = W[base + 2u + (o % 2u) * 2u] >> shift;   // qs[8*(o%2)+4 .. +8]
    let a = vec4<f32>(vec4<u32>(q0, q0 >> 8u, q0 >> 16u, q0 >> 24u) & vec4<u32>(15u));
    let b = vec4<f32>(vec4<u32>(q1, q1 >> 8u, q1 >> 16u, q1 >> 24u) & vec4<u32>(15u));
    return array<vec4<f32>, 2>(a * dm.x + dm.y, b * dm.x + dm.y);
}
