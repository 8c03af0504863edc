// Shared by the k-quant formats of matvec_q8.wgsl whose super-blocks are 256 weights with a header vec4 (d | dmin,
// then 12 bytes of 6-bit scales sc[s] and mins mn[s], read by kscales.wgsl) and whose values are unsigned (Q4_K, Q5_K):
// the product of one item, 16 bytes of values of sub-block 2j (lo) and 16 of sub-block 2j + 1 (hi), with the input
// (dot16, qx4: formats_matvec_q8/words.wgsl).

// Item m (m < 8) of super-block sb with header h: values lo (inputs 64j + 16(m%2) .. +16, j = m / 2, sub-block 2j)
// and hi (the same + 32, sub-block 2j + 1), 4 values a word:
// d * sum_s dx_s sc_s (q · qx) - dmin * sum_s dx_s mn_s sum(qx) over the two sub-blocks.
fn kquant_item(h: vec4<u32>, lo: vec4<u32>, hi: vec4<u32>, sb: u32, m: u32) -> f32 {
    let j = m / 2u;
    let sm = k4_scales(h.y, h.z, h.w);     // the 16 scales and mins one a byte (kscales.wgsl)
    let sh = (j % 2u) * 16u;           // sub-blocks 2j, 2j + 1: bytes 2(j%2), +1 of the sc / mn words
    let w = select(sm.xy, sm.zw, j >= 2u) >> vec2<u32>(sh);
    let sl = vec2<f32>(w & vec2<u32>(0xFFu));                       // (sc, mn) of sub-block 2j
    let shi = vec2<f32>((w >> vec2<u32>(8u)) & vec2<u32>(0xFFu));   // of 2j + 1
    let x0 = sb * 64u + 16u * j + 4u * (m % 2u);            // qx word of input 64j + 16(m%2)
    let a = dot16(lo, qx4(x0));
    let c = dot16(hi, qx4(x0 + 8u));
    let da = xd[sb * 8u + 2u * j];
    let db = xd[sb * 8u + 2u * j + 1u];
    let dm = unpack2x16float(h.x);
    return dm.x * (da * sl.x * f32(a.x) + db * shi.x * f32(c.x)) - dm.y * (da * sl.y * f32(a.y) + db * shi.y * f32(c.y));
}
