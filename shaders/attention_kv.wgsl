// The key and value loads of the tiled prefill attention kernels (attention_tiled.wgsl, attention_tiled64.wgsl,
// attention_tiled_h128.wgsl; kernels.attention_tiled appends this file): vec4 e of the key tile at k0 (key e / D4,
// vec4 e % D4) of KV head g, as f32, or zeros past the workgroup's last key n_max. Uses the kernel's Kc, Vc, D4 and
// KV_HEADS.
fn load_k(k0: u32, e: u32, g: u32, n_max: u32) -> vec4<f32> {
    let key = k0 + e / D4;
    if (key >= n_max) { return vec4<f32>(0.0); }
    return vec4<f32>(Kc[key * KV_HEADS * D4 + g * D4 + e % D4]);
}

fn load_v(k0: u32, e: u32, g: u32, n_max: u32) -> vec4<f32> {
    let key = k0 + e / D4;
    if (key >= n_max) { return vec4<f32>(0.0); }
    return vec4<f32>(Vc[key * KV_HEADS * D4 + g * D4 + e % D4]);
}
