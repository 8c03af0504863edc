// What the tiled prefill attention kernels (attention_tiled.wgsl, attention_tiled64.wgsl, attention_tiled_h128.wgsl)
// share, included by each: their bindings (each kernel's header lists their shapes) and the key and value loads:
// vec4 e of the key tile at k0 (key e / D4, vec4 e % D4) of KV head g, as f32, or zeros past the workgroup's last
// key n_max. Uses the kernel's D4, KV_HEADS and KVT.
@group(0) @binding(0) var<storage, read> Q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> Kc: array<vec4<KVT>>;
@group(0) @binding(2) var<storage, read> Vc: array<vec4<KVT>>;
@group(0) @binding(3) var<storage, read_write> O: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> step: Step;

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
