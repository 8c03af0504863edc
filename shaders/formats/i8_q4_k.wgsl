// Q4_K weights for matvec_q8.wgsl (layout in q4_k.wgsl: super-blocks of 256 weights in 144 bytes: d | dmin, 12 bytes
// of 6-bit scales sc[s] and mins mn[s] (see kscales.wgsl), 128 bytes of nibbles; weight j*64 + h*32 + l is
// d * sc[2j+h] * q - dmin * mn[2j+h], q nibble h of qs[j*32 + l]). 144 bytes are 9 vec4<u32>, so this format reads
// W as array<vec4<u32>> (WORD): item b is qs bytes 16m .. 16m+16 (m = b % 8) of super-block b / 8, one 16-byte
// load (neighbouring lanes read neighbouring vec4s), plus the super-block's header vec4 (shared by its 8 items).
// Those bytes hold weights 64j + 16(m%2) .. +16 (low nibbles, sub-block 2j) and the same + 32 (high, sub-block
// 2j + 1), j = m / 2. Sub-blocks are the activation's 32-blocks, so each has its own dx:
// d * sum_s dx_s sc_s (q · qx) - dmin * sum_s dx_s mn_s sum(qx).
alias WORD = vec4<u32>;
const ROW_VEC4: u32 = K / 256u * 9u;
const ITEMS: u32 = K / 32u;
const NIB: vec4<u32> = vec4<u32>(0x0F0F0F0Fu);

// sum_i q[i] · x[i] and sum_i 1 · x[i] over 4 words of 4 int8.
fn dot16(q: vec4<u32>, x: vec4<u32>) -> vec2<i32> {
    let one = 0x01010101u;
    return vec2<i32>(dot4I8Packed(q.x, x.x) + dot4I8Packed(q.y, x.y) + dot4I8Packed(q.z, x.z) + dot4I8Packed(q.w, x.w),
                     dot4I8Packed(one, x.x) + dot4I8Packed(one, x.y) + dot4I8Packed(one, x.z) + dot4I8Packed(one, x.w));
}

fn qx4(w: u32) -> vec4<u32> {
    return vec4<u32>(qx[w], qx[w + 1u], qx[w + 2u], qx[w + 3u]);
}

fn item_dot(row: u32, b: u32) -> f32 {
    let m = b % 8u;
    let sb = b / 8u;
    let base = row * ROW_VEC4 + sb * 9u;
    let h = W[base];
    let q = W[base + 1u + m];
    let j = m / 2u;
    // the 16 scales and mins one a byte (sc[0..4], mn[0..4], sc[4..8], mn[4..8]), as kscales.wgsl's k4_scales
    let sm = vec4<u32>(h.y & 0x3F3F3F3Fu, h.z & 0x3F3F3F3Fu,
                       (h.w & 0x0F0F0F0Fu) | ((h.y >> 2u) & 0x30303030u),
                       ((h.w >> 4u) & 0x0F0F0F0Fu) | ((h.z >> 2u) & 0x30303030u));
    let sh = (j % 2u) * 16u;           // sub-blocks 2j, 2j + 1: bytes 2(j%2), +1 of the sc / mn words
    let w = select(sm.xy, sm.zw, j >= 2u) >> vec2<u32>(sh);
    let lo = vec2<f32>(w & vec2<u32>(0xFFu));               // (sc, mn) of sub-block 2j
    let hi = vec2<f32>((w >> vec2<u32>(8u)) & vec2<u32>(0xFFu));   // of 2j + 1
    let x0 = sb * 64u + 16u * j + 4u * (m % 2u);            // qx word of input 64j + 16(m%2)
    let a = dot16(q & NIB, qx4(x0));
    let c = dot16((q >> vec4<u32>(4u)) & NIB, qx4(x0 + 8u));
    let da = xd[sb * 8u + 2u * j];
    let db = xd[sb * 8u + 2u * j + 1u];
    let dm = unpack2x16float(h.x);
    return dm.x * (da * lo.x * f32(a.x) + db * hi.x * f32(c.x)) - dm.y * (da * lo.y * f32(a.y) + db * hi.y * f32(c.y));
}
