// Q3_K weights: each row is K/256 super-blocks of 110 bytes:
//   bytes 0..31     hmask: high bits
//   bytes 32..95    qs: low 2 bits
//   bytes 96..107   16 six-bit scales sc[i], stored + 32: low 4 bits in bytes 0..7 (low nibbles for i < 8, high
//                   nibbles for i >= 8, byte i % 8), top 2 bits in bytes 8..11 (byte 8 + i % 4, bits 2*(i/4))
//   bytes 108..109  d (f16)
// Weight n*128 + j*32 + l of a super-block (n < 2, j < 4, l < 32) is d * (sc[n*8 + 2j + l/16] - 32) * (q - 4),
// with q = ((qs[n*32 + l] >> 2j) & 3) | ((hmask[l] >> (4n + j)) & 1) << 2.
// Super-blocks start on 2-byte boundaries: read_u32 (bytes.wgsl) shifts. Provides w8(row, oct).
const ROW_BYTES: u32 = K / 256u * 110u;

// Four 3-bit values minus 4: bits 0..1 of the bytes of q, bit 0 of the bytes of h on top.
fn q3_quad(q: u32, h: u32) -> vec4<f32> {
    let v = (q & 0x03030303u) | ((h & 0x01010101u) << 2u);
    return vec4<f32>(vec4<u32>(v, v >> 8u, v >> 16u, v >> 24u) & vec4<u32>(7u)) - 4.0;
}

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let base = row * ROW_BYTES + (oct / 32u) * 110u;
    let o = oct % 32u;                 // weights 8o .. 8o+8 of the super-block: n = o / 16, j = (o / 4) % 4
    let n = o / 16u;
    let j = (o / 4u) % 4u;
    let l0 = (o % 4u) * 8u;
    let i = 8u * n + 2u * j + l0 / 16u;                               // sub-block
    let low = (read_u32(base + 96u + i % 8u) >> (4u * (i / 8u))) & 15u;
    let high = (read_u32(base + 104u + i % 4u) >> (2u * (i / 4u))) & 3u;
    let scale = read_f16(base + 108u) * (f32(low | (high << 4u)) - 32.0);
    let q = base + 32u + n * 32u + l0;
    let h = base + l0;
    return array<vec4<f32>, 2>(q3_quad(read_u32(q) >> (2u * j), read_u32(h) >> (4u * n + j)) * scale,
                               q3_quad(read_u32(q + 4u) >> (2u * j), read_u32(h + 4u) >> (4u * n + j)) * scale);
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Dot product of block b of a row with xin(x .. x + 32) (vec4 index). A block is one 128-weight half n of a
// super-block: every bit of qs[n*32 ..+32], four bits of each hmask byte, scales sc[n*8 .. n*8+8].
const BLOCK: u32 = 128u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let base = row * ROW_BYTES + (b / 2u) * 110u;    // even byte offset
    let n = b % 2u;
    // word i of the super-block (bytes 4i .. 4i+4 after base) is (W[a+i] >> s) | (W[a+i+1] << (32 - s)),
    // s = 0 or 16 (written so that the second term vanishes when s = 0); each W word is loaded once
    let a = base >> 2u;
    let s = (base & 2u) * 8u;
    var hm: array<u32, 8>;             // words 0..8: hmask
    var prev = W[a];
    for (var i = 0u; i < 8u; i++) {
        let next = W[a + i + 1u];
        hm[i] = (prev >> s) | ((next << 1u) << (31u - s));
        prev = next;
    }
    var qs: array<u32, 8>;             // words 8 + 8n .. +8
    prev = W[a + 8u + 8u * n];
    for (var i = 0u; i < 8u; i++) {
        let next = W[a + 9u + 8u * n + i];
        qs[i] = (prev >> s) | ((next << 1u) << (31u - s));
        prev = next;
    }
    let w24 = W[a + 24u];
    let w25 = W[a + 25u];
    let w26 = W[a + 26u];
    let w27 = W[a + 27u];
    let w28 = W[a + 28u];
    let s0 = (w24 >> s) | ((w25 << 1u) << (31u - s));              // scale bytes 0..3
    let s1 = (w25 >> s) | ((w26 << 1u) << (31u - s));              // 4..7
    let s2 = (w26 >> s) | ((w27 << 1u) << (31u - s));              // 8..11
    let d = unpack2x16float((w27 >> s) | ((w28 << 1u) << (31u - s))).x;
    // the 8 scales of half n, one per byte (+32): sc_a = sub-blocks 8n .. 8n+3, sc_b = 8n+4 .. 8n+7
    let sc_a = ((s0 >> (4u * n)) & 0x0F0F0F0Fu) | (((s2 >> (4u * n)) & 0x03030303u) << 4u);
    let sc_b = ((s1 >> (4u * n)) & 0x0F0F0F0Fu) | (((s2 >> (4u * n + 2u)) & 0x03030303u) << 4u);
    var acc = 0.0;
    for (var j = 0u; j < 4u; j++) {    // weights n*128 + j*32 + l: sub-blocks 8n + 2j (l < 16) and 8n + 2j + 1
        var s_a = 0.0;
        var s_b = 0.0;
        for (var i = 0u; i < 4u; i++) {
            s_a += dot(q3_quad(qs[i] >> (2u * j), hm[i] >> (4u * n + j)), xin(x + 8u * j + i));
            s_b += dot(q3_quad(qs[4u + i] >> (2u * j), hm[4u + i] >> (4u * n + j)), xin(x + 8u * j + 4u + i));
        }
        let sw = select(sc_a, sc_b, j >= 2u) >> (16u * (j % 2u));
        acc += (f32(sw & 0xFFu) - 32.0) * s_a + (f32((sw >> 8u) & 0xFFu) - 32.0) * s_b;
    }
    return d * acc;
}
