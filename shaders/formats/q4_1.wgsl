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

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Items of BLOCK = 8 weights, INTERLEAVED: item b is qs word c = b % 4 of block b / 4, i.e. weights 4c .. 4c+4 (low
// nibbles) and 16+4c .. 16+4c+4 (high nibbles). The 4 items of a block cover it exactly once, so a row's sum is
// unchanged, but lanes sharing a row (neighbouring b) read neighbouring words of W: coalesced on a GPU.
// x is the vec4 index item b would have if items were contiguous (t*K/4 + 2b); the block starts at x - 2c.
// sum_j (d q_j + m) x_j = d * sum_j q_j x_j + m * sum_j x_j.
const BLOCK: u32 = 8u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let c = b % 4u;
    let base = row * ROW_WORDS + (b / 4u) * 5u;
    let dm = unpack2x16float(W[base]);
    let q = W[base + 1u + c];
    let lo = vec4<f32>(vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) & vec4<u32>(15u));
    let hi = vec4<f32>(vec4<u32>(q >> 4u, q >> 12u, q >> 20u, q >> 28u) & vec4<u32>(15u));
    let xl = xin(x - c);          // x - 2c + c: weights 4c ..
    let xh = xin(x + 4u - c);     // weights 16 + 4c ..
    return dm.x * (dot(lo, xl) + dot(hi, xh)) + dm.y * dot(xl + xh, vec4<f32>(1.0));
}
