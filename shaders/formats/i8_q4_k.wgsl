// Q4_K weights for matvec_q8.wgsl (layout in q4_k.wgsl: super-blocks of 256 weights, 36 words: d | dmin, 12 bytes of
// 6-bit scales sc[s] and mins mn[s] (kscales.wgsl), 128 bytes of nibbles; weight j*64 + h*32 + l is
// d * sc[2j+h] * q - dmin * mn[2j+h], q nibble h of qs[j*32 + l]). Item b is word column c = b % 8 of super-block
// b / 8, as in q4_k.wgsl: qs word 8i + c for i < 4, weights 64i + 4c .. +4 (low nibbles, sub-block 2i) and
// 64i + 32 + 4c .. +4 (high, sub-block 2i + 1). Sub-blocks are the activation's 32-blocks, so each has its own dx:
// sum = d * sum_s dx_s sc_s (q · qx) - dmin * sum_s dx_s mn_s sum(qx). Needs kscales.wgsl.
const ROW_WORDS: u32 = K / 256u * 36u;
const ITEMS: u32 = K / 32u;

fn item_dot(row: u32, b: u32) -> f32 {
    let c = b % 8u;
    let sb = b / 8u;
    let base = row * ROW_WORDS + sb * 36u;
    let dm = unpack2x16float(W[base]);
    let sm = k4_scales(base);
    var a = 0.0;
    var m = 0.0;
    for (var i = 0u; i < 4u; i++) {
        let q = W[base + 4u + 8u * i + c];
        let xa = qx[sb * 64u + 16u * i + c];          // inputs 64i + 4c .. +4 of the super-block
        let xb = qx[sb * 64u + 16u * i + 8u + c];     // inputs 64i + 32 + 4c .. +4
        let da = xd[sb * 8u + 2u * i];
        let db = xd[sb * 8u + 2u * i + 1u];
        let lo = k4_scale_min(sm, 2u * i);
        let hi = k4_scale_min(sm, 2u * i + 1u);
        a += da * lo.x * f32(dot4I8Packed(q & 0x0F0F0F0Fu, xa))
           + db * hi.x * f32(dot4I8Packed((q >> 4u) & 0x0F0F0F0Fu, xb));
        m += da * lo.y * f32(dot4I8Packed(0x01010101u, xa)) + db * hi.y * f32(dot4I8Packed(0x01010101u, xb));
    }
    return dm.x * a - dm.y * m;
}
