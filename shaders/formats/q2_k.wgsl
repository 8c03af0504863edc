// Q2_K weights: each row is K/256 super-blocks of 84 bytes (21 words):
//   words 0..3    16 scale bytes, one per 16 weights: low nibble scale sc, high nibble min mn
//   words 4..19   qs: 64 bytes of 2-bit values
//   word 20       d | dmin << 16 (f16 pair)
// Weight n*128 + j*32 + l of a super-block (n < 2, j < 4, l < 32) is d * sc[i] * q - dmin * mn[i] with
// q = (qs[n*32 + l] >> 2j) & 3 and i = n*8 + 2j + l/16 its sub-block. Provides w8(row, oct).
const ROW_WORDS: u32 = K / 256u * 21u;

// Four 2-bit values: bits 0..1 of the bytes of q.
fn q2_quad(q: u32) -> vec4<f32> {
    return vec4<f32>(vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) & vec4<u32>(3u));
}

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let base = row * ROW_WORDS + (oct / 32u) * 21u;
    let o = oct % 32u;                 // weights 8o .. 8o+8 of the super-block: n = o / 16, j = (o / 4) % 4
    let n = o / 16u;
    let j = (o / 4u) % 4u;
    let i = 8u * n + 2u * j + (o % 4u) / 2u;                           // sub-block
    let sm = (W[base + i / 4u] >> (8u * (i % 4u))) & 0xFFu;
    let dm = unpack2x16float(W[base + 20u]);
    let scale = dm.x * f32(sm & 15u);
    let offset = dm.y * f32(sm >> 4u);
    let q = base + 4u + 8u * n + 2u * (o % 4u);                        // qs[n*32 + 8*(o%4)], word index
    return array<vec4<f32>, 2>(q2_quad(W[q] >> (2u * j)) * scale - offset,
                               q2_quad(W[q + 1u] >> (2u * j)) * scale - offset);
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Blocks of BLOCK = 32 weights, INTERLEAVED: block b is part c = b % 8 of super-block b / 8, the weights stored in
// word column c of the super-block (qs bytes n*32 + 4c .. +4 for n < 2: weights n*128 + j*32 + 4c .. +4 for j < 4).
// Each block_dot adds the products of 32 distinct weights with their own inputs and the 8 parts of a super-block
// cover it exactly once, so a row's sum is the same as with contiguous blocks; but the lanes sharing a row
// (neighbouring b) now read neighbouring words of W and neighbouring vec4s of X, which on a GPU is several times
// faster than each lane reading a whole block of its own (measured on an H200). x is the vec4 index block b would
// have if it were contiguous (t*K/4 + b*8); block_dot reads xin over its whole super-block, from x - c*8 on.
const BLOCK: u32 = 32u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let c = b % 8u;
    let x0 = x - c * 8u;
    let base = row * ROW_WORDS + (b / 8u) * 21u;
    let dm = unpack2x16float(W[base + 20u]);
    let pick = 8u * (c / 4u);          // weights 4c .. lie in the second 16-weight sub-block of each j when c >= 4
    let one = vec4<f32>(1.0);
    var acc = 0.0;
    var mins = 0.0;
    for (var n = 0u; n < 2u; n++) {
        let q = W[base + 4u + 8u * n + c];             // qs[n*32 + 4c ..]: bits 2j, 2j+1
        let sa = W[base + 2u * n];                     // scale bytes n*8 .. +4: the sub-blocks of j = 0, 1
        let sb = W[base + 2u * n + 1u];                // n*8+4 .. +8: j = 2, 3
        let m0 = (sa >> pick) & 0xFFu;                 // low nibble: scale; high nibble: min
        let m1 = (sa >> (16u + pick)) & 0xFFu;
        let m2 = (sb >> pick) & 0xFFu;
        let m3 = (sb >> (16u + pick)) & 0xFFu;
        let xb = x0 + 32u * n + c;
        let x_0 = xin(xb);
        let x_1 = xin(xb + 8u);
        let x_2 = xin(xb + 16u);
        let x_3 = xin(xb + 24u);
        acc += f32(m0 & 15u) * dot(q2_quad(q), x_0) + f32(m1 & 15u) * dot(q2_quad(q >> 2u), x_1)
             + f32(m2 & 15u) * dot(q2_quad(q >> 4u), x_2) + f32(m3 & 15u) * dot(q2_quad(q >> 6u), x_3);
        mins += f32(m0 >> 4u) * dot(x_0, one) + f32(m1 >> 4u) * dot(x_1, one)
              + f32(m2 >> 4u) * dot(x_2, one) + f32(m3 >> 4u) * dot(x_3, one);
    }
    return dm.x * acc - dm.y * mins;
}
