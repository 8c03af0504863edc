// The 6-bit scales and mins of a Q4_K or Q5_K super-block (kernels.build appends this file for those formats, and
// for their int8 readers). Words 1..3 of the super-block hold 12 bytes q[0..12] packing 8 scales sc[s] and 8 mins
// mn[s], one pair per 32-weight sub-block s:
//   s < 4:  sc = q[s] & 63,                          mn = q[s+4] & 63
//   s >= 4: sc = (q[s+4] & 15) | (q[s-4] >> 6) << 4,  mn = (q[s+4] >> 4) | (q[s] >> 6) << 4

// All 16 out of those words s0, s1, s2, one per byte: (sc[0..4], mn[0..4], sc[4..8], mn[4..8]), computed on whole
// words ((w >> 2) & 0x30 per byte moves bits 6-7 to 4-5).
fn k4_scales(s0: u32, s1: u32, s2: u32) -> vec4<u32> {
    return vec4<u32>(s0 & 0x3F3F3F3Fu, s1 & 0x3F3F3F3Fu,
                     (s2 & 0x0F0F0F0Fu) | ((s0 >> 2u) & 0x30303030u),
                     ((s2 >> 4u) & 0x0F0F0F0Fu) | ((s1 >> 2u) & 0x30303030u));
}

// (sc[s], mn[s]) out of k4_scales' words `sm`.
fn k4_scale_min(sm: vec4<u32>, s: u32) -> vec2<f32> {
    let w = select(sm.xy, sm.zw, s >= 4u) >> vec2<u32>((s % 4u) * 8u);
    return vec2<f32>(w & vec2<u32>(0xFFu));
}
