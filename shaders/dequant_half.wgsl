// A slab of a weight's rows dequantized to f16 for a subgroup matrix product (matmul_sgmat.wgsl):
//   WH[r, k] = W[R0 + r, k] for r < S, and with GLU WH[SP + r, k] = W[N + R0 + r, k] (the up rows; SP: S rounded up
//   to the product's tile rows), each rounded to f16 (clamped to its finite range); rows past N are zeros.
// Written as pairs packed into u32 (pack2x16float: no shader-f16 needed here). One thread an octet of a row (the
// format's w8), 4 words.
//
// Constants: K (a multiple of 8 and of the format's block), N (rows of the weight, 2N stacked with GLU), R0, S, SP,
//   GLU, WG; kernels.dequant_half.
// Bindings:
//   0 W: array<u32>          packed weights, N rows (2N with GLU)
//   1 WH: array<vec4<u32>>   [HALVES * SP, K / 8] eight f16 a vec4
// Dispatch: spread(ceil(HALVES * S * K / 8 / WG)) workgroups of WG threads (kernels.dequant_half_groups).
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read_write> WH: array<vec4<u32>>;

const K8: u32 = K / 8u;
const HALVES: u32 = select(1u, 2u, GLU);
const H_MAX: f32 = 65504.0;                      // f16's largest finite value

fn h2(v: vec2<f32>) -> u32 {
    return pack2x16float(clamp(v, vec2<f32>(-H_MAX), vec2<f32>(H_MAX)));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let i = flat_group(wid, nwg) * WG + tid;
    if (i >= HALVES * S * K8) {
        return;
    }
    let o = i % K8;
    let r = (i / K8) % S;
    let h = i / (S * K8);
    var w = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    if (R0 + r < N) {
        w = w8(h * N + R0 + r, o);
    }
    WH[(h * SP + r) * K8 + o] = vec4<u32>(h2(w[0].xy), h2(w[0].zw), h2(w[1].xy), h2(w[1].zw));
}
