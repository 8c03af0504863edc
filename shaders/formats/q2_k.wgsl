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
// Dot product of block b of a row with xin(x .. x + 32) (vec4 index). A block is one 128-weight half n of a
// super-block: every bit of qs[n*32 ..+32] and scale bytes n*8 .. n*8+8.
const BLOCK: u32 = 128u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let base = row * ROW_WORDS + (b / 2u) * 21u;
    let n = b % 2u;
    let dm = unpack2x16float(W[base + 20u]);
    var qs: array<u32, 8>;
    for (var i = 0u; i < 8u; i++) {
        qs[i] = W[base + 4u + 8u * n + i];
    }
    let sc0 = W[base + 2u * n];        // scale bytes of sub-blocks 8n .. 8n+3
    let sc1 = W[base + 2u * n + 1u];   // 8n+4 .. 8n+7
    var acc = 0.0;
    var mins = 0.0;
    for (var j = 0u; j < 4u; j++) {    // weights n*128 + j*32 + l: sub-blocks 8n + 2j (l < 16) and 8n + 2j + 1
        var s_a = 0.0;
        var s_b = 0.0;
        var x_a = vec4<f32>(0.0);
        var x_b = vec4<f32>(0.0);
        for (var i = 0u; i < 4u; i++) {
            let xa = xin(x + 8u * j + i);
            let xb = xin(x + 8u * j + 4u + i);
            s_a += dot(q2_quad(qs[i] >> (2u * j)), xa);
            s_b += dot(q2_quad(qs[4u + i] >> (2u * j)), xb);
            x_a += xa;
            x_b += xb;
        }
        let sw = select(sc0, sc1, j >= 2u) >> (16u * (j % 2u));
        let b_a = sw & 0xFFu;
        let b_b = (sw >> 8u) & 0xFFu;
        acc += f32(b_a & 15u) * s_a + f32(b_b & 15u) * s_b;
        mins += f32(b_a >> 4u) * (x_a.x + x_a.y + x_a.z + x_a.w) + f32(b_b >> 4u) * (x_b.x + x_b.y + x_b.z + x_b.w);
    }
    return dm.x * acc - dm.y * mins;
}
