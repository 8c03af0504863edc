// Q6_K weights: each row is K/256 super-blocks of 210 bytes:
//   bytes 0..127    ql: low 4 bits
//   bytes 128..191  qh: high 2 bits
//   bytes 192..207  16 int8 scales sc[s], one per 16 weights
//   bytes 208..209  d (f16)
// Weight n*128 + k*32 + l of a super-block (n < 2, k < 4, l < 32) is d * sc[n*8 + 2k + l/16] * (q - 32), with
// q = (nibble k/2 of ql[n*64 + (k%2)*32 + l]) | ((qh[n*32 + l] >> 2k) & 3) << 4.
// Super-blocks start on 2-byte boundaries: read_u32 (bytes.wgsl) shifts. Provides w8(row, oct).
const ROW_BYTES: u32 = K / 256u * 210u;

// Four 6-bit values minus 32: low nibbles of the bytes of l, bits 0..1 of the bytes of h on top.
fn q6_quad(l: u32, h: u32) -> vec4<f32> {
    let v = (l & 0x0F0F0F0Fu) | ((h & 0x03030303u) << 4u);
    return vec4<f32>(vec4<u32>(v, v >> 8u, v >> 16u, v >> 24u) & vec4<u32>(63u)) - 32.0;
}

// Signed byte i (0..3) of word w, as f32.
fn q6_i8(w: u32, i: u32) -> f32 {
    return f32(bitcast<i32>(w << (24u - 8u * i)) >> 24u);
}

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let base = row * ROW_BYTES + (oct / 32u) * 210u;
    let o = oct % 32u;                 // weights 8o .. 8o+8 of the super-block: n = o / 16, k = (o / 4) % 4
    let n = o / 16u;
    let k = (o / 4u) % 4u;
    let l0 = (o % 4u) * 8u;
    let lo = base + n * 64u + (k % 2u) * 32u + l0;
    let hi = base + 128u + n * 32u + l0;
    let sc = q6_i8(read_u32(base + 192u + n * 8u + 2u * k + l0 / 16u), 0u);
    let scale = read_f16(base + 208u) * sc;
    return array<vec4<f32>, 2>(q6_quad(read_u32(lo) >> (4u * (k / 2u)), read_u32(hi) >> (2u * k)) * scale,
                               q6_quad(read_u32(lo + 4u) >> (4u * (k / 2u)), read_u32(hi + 4u) >> (2u * k)) * scale);
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Dot product of block b of a row with xin(x .. x + 32) (vec4 index). A block is one 128-weight half n of a
// super-block: it uses every bit of ql[n*64 ..+64], qh[n*32 ..+32] and scales sc[n*8 ..+8].
const BLOCK: u32 = 128u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let base = row * ROW_BYTES + (b / 2u) * 210u;    // even byte offset
    let n = b % 2u;
    // word i of the super-block (bytes 4i .. 4i+4 after base) is (W[a+i] >> s) | (W[a+i+1] << (32 - s)),
    // s = 0 or 16 (written so that the second term vanishes when s = 0); each W word is loaded once
    let a = base >> 2u;
    let s = (base & 2u) * 8u;
    var ql: array<u32, 16>;            // words n*16 .. n*16+16
    var prev = W[a + n * 16u];
    for (var i = 0u; i < 16u; i++) {
        let next = W[a + n * 16u + i + 1u];
        ql[i] = (prev >> s) | ((next << 1u) << (31u - s));
        prev = next;
    }
    var qh: array<u32, 8>;             // words 32 + 8n .. +8
    prev = W[a + 32u + n * 8u];
    for (var i = 0u; i < 8u; i++) {
        let next = W[a + 32u + n * 8u + i + 1u];
        qh[i] = (prev >> s) | ((next << 1u) << (31u - s));
        prev = next;
    }
    let w48 = W[a + 48u + n * 2u];     // scale words 48 + 2n, +1: sc[n*8 .. n*8+8]
    let w49 = W[a + 49u + n * 2u];
    let w50 = W[a + 50u + n * 2u];
    let sc0 = (w48 >> s) | ((w49 << 1u) << (31u - s));
    let sc1 = (w49 >> s) | ((w50 << 1u) << (31u - s));
    let d = unpack2x16float((W[a + 52u] >> s) | ((W[a + 53u] << 1u) << (31u - s))).x;
    var acc = 0.0;
    for (var k = 0u; k < 4u; k++) {    // weights n*128 + k*32 + l: sub-blocks 2k (l < 16) and 2k+1
        var s_a = 0.0;
        var s_b = 0.0;
        for (var i = 0u; i < 4u; i++) {
            s_a += dot(q6_quad(ql[(k % 2u) * 8u + i] >> (4u * (k / 2u)), qh[i] >> (2u * k)), xin(x + 8u * k + i));
            s_b += dot(q6_quad(ql[(k % 2u) * 8u + 4u + i] >> (4u * (k / 2u)), qh[4u + i] >> (2u * k)),
                       xin(x + 8u * k + 4u + i));
        }
        let sw = select(sc0, sc1, k >= 2u);
        acc += q6_i8(sw, (2u * k) % 4u) * s_a + q6_i8(sw, (2u * k) % 4u + 1u) * s_b;
    }
    return d * acc;
}
