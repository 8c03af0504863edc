// The inputs of a subgroup matrix product (matmul_sgmat.wgsl) in f16: XH[t, k] = xin[t, k] rounded to f16 (clamped to
// its finite range), xin = X (NORM false) or rmsnorm(X[t]) * G (NORM true). Written as pairs packed into u32
// (pack2x16float: no shader-f16 needed here). One workgroup a token: with NORM its threads first sum the squares of
// the row (strided vec4s, a tree through workgroup memory), then each writes strided vec4s as two words.
//
// Constants: K (a multiple of 4), NORM, EPS, WG (threads a workgroup, a power of two); kernels.half_rows.
// Bindings:
//   0 X: array<vec4<f32>>   [n_tokens, K]
//   1 XH: array<vec2<u32>>  [n_tokens, K / 4] four f16 a vec2
//   2 step: uniform Step
//   3 G: array<vec4<f32>>   [K] the norm's gain (read only with NORM; bind any buffer otherwise)
// Dispatch: (n_tokens_max, 1, 1) workgroups of WG threads; tokens past the pass's end return at once.
@group(0) @binding(0) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> XH: array<vec2<u32>>;
@group(0) @binding(2) var<uniform> step: Step;
@group(0) @binding(3) var<storage, read> G: array<vec4<f32>>;

const K4: u32 = K / 4u;
const H_MAX: f32 = 65504.0;                      // f16's largest finite value

var<workgroup> part: array<f32, WG>;

//#include "rms_scale.wgsl"

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let t = wid.x;
    if (t >= step.n_tokens) {
        return;
    }
    let scale = rms_scale(t, tid);      // 1 without NORM
    for (var k = tid; k < K4; k += WG) {
        var x = X[t * K4 + k];
        if (NORM) {
            x = x * scale * G[k];
        }
        x = clamp(x, vec4<f32>(-H_MAX), vec4<f32>(H_MAX));
        XH[t * K4 + k] = vec2<u32>(pack2x16float(x.xy), pack2x16float(x.zw));
    }
}
