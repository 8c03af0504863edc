// Q5_K weights: each row is K/256 super-blocks of 176 bytes (44 words):
//   word 0         d | dmin << 16 (f16 pair)
//   words 1..3     12 bytes packing 8 six-bit scales sc[s] and 8 six-bit mins mn[s] (as Q4_K, see kscales.wgsl)
//   words 4..11    qh: 32 bytes of high bits
//   words 12..43   qs: 128 bytes of nibbles
// Weight j*64 + h*32 + l of a super-block (j < 4, h < 2, l < 32) is d * sc[s] * q - dmin * mn[s] with
// q = (nibble h of qs[j*32 + l]) | (bit s of qh[l]) << 4 and s = 2j + h its 32-weight sub-block.
// Provides w8(row, oct): weights row[8*oct .. 8*oct+8]. Needs kscales.wgsl (k4_scales, k4_scale_min).
const ROW_WORDS: u32 = K / 256u * 44u;

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
    let sm = k4_scale_min(k4_scales(W[base + 1u], W[base + 2u], W[base + 3u]), s);
    let scale = dm.x * sm.x;
    let offset = dm.y * sm.y;
    let q = base + 12u + 8u * j + 2u * (o % 4u);       // qs[j*32 + 8*(o%4)], word index
    let qh = base + 4u + 2u * (o % 4u);                // qh[8*(o%4)]
    return array<vec4<f32>, 2>(k5_quad(W[q] >> (4u * h), W[qh] >> s) * scale - offset,
                               k5_quad(W[q + 1u] >> (4u * h), W[qh + 1u] >> s) * scale - offset);
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Blocks of BLOCK = 32 weights, INTERLEAVED: block b is part c = b % 8 of super-block b / 8, the weights stored in
// word column c of the super-block (qs bytes 32i + 4c .. +4 for i < 4 and qh bytes 4c .. +4: weights 64i + 4c .. +4
// from the low nibbles and qh bit 2i, 64i + 32 + 4c .. +4 from the high ones and bit 2i + 1). Each block_dot adds
// the products of 32 distinct weights with their own inputs and the 8 parts of a super-block cover it exactly once,
// so a row's sum is the same as with contiguous blocks; but the lanes sharing a row (neighbouring b) now read
// neighbouring words of W and neighbouring vec4s of X, which on a GPU is several times faster than each lane reading
// a whole block of its own (measured on an H200). x is the vec4 index block b would have if it were contiguous
// (t*K/4 + b*8); block_dot reads xin over its whole super-block, from x - c*8 on.
const BLOCK: u32 = 32u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let c = b % 8u;
    let x0 = x - c * 8u;
    let base = row * ROW_WORDS + (b / 8u) * 44u;
    let dm = unpack2x16float(W[base]);
    let sm = k4_scales(W[base + 1u], W[base + 2u], W[base + 3u]);
    let one = vec4<f32>(1.0);
    let h = W[base + 4u + c];          // qh[4c .. 4c+4]: bit s is the 5th bit in sub-block s
    var acc = 0.0;
    var mins = 0.0;
    for (var i = 0u; i < 4u; i++) {    // quarter i: sub-blocks 2i (low nibbles) and 2i + 1 (high nibbles)
        let q = W[base + 12u + 8u * i + c];
        let xl = xin(x0 + 16u * i + c);
        let xh = xin(x0 + 16u * i + 8u + c);
        let lo = k4_scale_min(sm, 2u * i);            // (sc, mn) of sub-block 2i
        let hi = k4_scale_min(sm, 2u * i + 1u);       // and of 2i + 1
        acc += lo.x * dot(k5_quad(q, h >> (2u * i)), xl) + hi.x * dot(k5_quad(q >> 4u, h >> (2u * i + 1u)), xh);
        mins += lo.y * dot(xl, one) + hi.y * dot(xh, one);
    }
    return dm.x * acc - dm.y * mins;
}
