// Q5_K weights: each row is K/256 super-blocks of 176 bytes (44 words):
//   word 0         d | dmin << 16 (f16 pair)
//   words 1..3     12 bytes packing 8 six-bit scales sc[s] and 8 six-bit mins mn[s] (as Q4_K, see k4_scale_min)
//   words 4..11    qh: 32 bytes of high bits
//   words 12..43   qs: 128 bytes of nibbles
// Weight j*64 + h*32 + l of a super-block (j < 4, h < 2, l < 32) is d * sc[s] * q - dmin * mn[s] with
// q = (nibble h of qs[j*32 + l]) | (bit s of qh[l]) << 4 and s = 2j + h its 32-weight sub-block.
// Provides w8(row, oct): weights row[8*oct .. 8*oct+8].
const ROW_WORDS: u32 = K / 256u * 44u;

// (sc[s], mn[s]) of the super-block at word `base`: the Q4_K packing (bytes q[0..12] of words 1..3)
//   s < 4:  sc = q[s] & 63,                          mn = q[s+4] & 63
//   s >= 4: sc = (q[s+4] & 15) | (q[s-4] >> 6) << 4,  mn = (q[s+4] >> 4) | (q[s] >> 6) << 4
fn k5_scale_min(base: u32, s: u32) -> vec2<f32> {
    let s0 = W[base + 1u];
    let s1 = W[base + 2u];
    let s2 = W[base + 3u];
    let hi = s >= 4u;
    let scw = select(s0 & 0x3F3F3F3Fu, (s2 & 0x0F0F0F0Fu) | ((s0 >> 2u) & 0x30303030u), hi);
    let mnw = select(s1 & 0x3F3F3F3Fu, ((s2 >> 4u) & 0x0F0F0F0Fu) | ((s1 >> 2u) & 0x30303030u), hi);
    let sh = (s % 4u) * 8u;
    return vec2<f32>(f32((scw >> sh) & 0xFFu), f32((mnw >> sh) & 0xFFu));
}

// Four 5-bit values: the low nibbles of the bytes of q, with bit 0 of each byte of h on top.
fn k5_quad(q: u32, h: u32) -> vec4<f32> {
    let v = (q & 0x0F0F0F0Fu) | ((h & 0x01010101u) << 4u);
    return vec4<f32>(vec4<u32>(v, v >> 8u, v >> 16u, v >> 24u) & vec4<u32>(31u));
}

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let base = row * ROW_WORDS + (oct / 32u) * 44u;
    let o = oct % 32u;                 // weights 8o .. 8o+8 of the super-block: j = o / 8, h = (o / 4) % 2
    let j = o / 8u;
    let h = (o / 4u) % 2u;
    let s = 2u * j + h;
    let dm = unpack2x16float(W[base]);
    let sm = k5_scale_min(base, s);
    let scale = dm.x * sm.x;
    let offset = dm.y * sm.y;
    let q = base + 12u + 8u * j + 2u * (o % 4u);       // qs[j*32 + 8*(o%4)], word index
    let qh = base + 4u + 2u * (o % 4u);                // qh[8*(o%4)]
    return array<vec4<f32>, 2>(k5_quad(W[q] >> (4u * h), W[qh] >> s) * scale - offset,
                               k5_quad(W[q + 1u] >> (4u * h), W[qh + 1u] >> s) * scale - offset);
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Dot product of block b of a row with xin(x .. x + 16) (vec4 index). A block is one 64-weight quarter j of a
// super-block (sub-blocks 2j and 2j+1, sharing qs[j*32 ..] and bits 2j, 2j+1 of qh).
const BLOCK: u32 = 64u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let base = row * ROW_WORDS + (b / 4u) * 44u;
    let j = b % 4u;
    let dm = unpack2x16float(W[base]);
    let sm0 = k5_scale_min(base, 2u * j);
    let sm1 = k5_scale_min(base, 2u * j + 1u);
    var s0 = 0.0;
    var s1 = 0.0;
    var x0 = vec4<f32>(0.0);
    var x1 = vec4<f32>(0.0);
    for (var i = 0u; i < 8u; i++) {
        let q = W[base + 12u + 8u * j + i];            // qs[j*32 + 4i .. +4]: weights 4i.. (low), 32+4i.. (high)
        let h = W[base + 4u + i] >> (2u * j);          // qh[4i .. +4], bit 2j at bit 0 of each byte
        let xl = xin(x + i);
        let xh = xin(x + 8u + i);
        s0 += dot(k5_quad(q, h), xl);
        s1 += dot(k5_quad(q >> 4u, h >> 1u), xh);
        x0 += xl;
        x1 += xh;
    }
    let m = dm.y * (sm0.y * (x0.x + x0.y + x0.z + x0.w) + sm1.y * (x1.x + x1.y + x1.z + x1.w));
    return dm.x * (sm0.x * s0 + sm1.x * s1) - m;
}
