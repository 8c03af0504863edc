// rms_scale(t, tid): the RMSNorm factor 1 / sqrt(mean(X[t]^2) + EPS) of token t's row with NORM, 1 without, for
// every thread of the workgroup: its WG threads sum strided vec4s of the row, then a tree through workgroup memory.
// Included by quantize_rows.wgsl and half_rows.wgsl, which declare X: array<vec4<f32>> [n_tokens, K], K4 = K / 4,
// NORM, EPS, WG (a power of two) and part: array<f32, WG>. Call it in uniform control flow (it has barriers); part is
// free again when it returns.
fn rms_scale(t: u32, tid: u32) -> f32 {
    if (!NORM) {
        return 1.0;
    }
    var ss = 0.0;
    for (var k = tid; k < K4; k += WG) {
        let v = X[t * K4 + k];
        ss += dot(v, v);
    }
    part[tid] = ss;
    for (var m = WG / 2u; m > 0u; m /= 2u) {
        workgroupBarrier();
        if (tid < m) {
            part[tid] += part[tid + m];
        }
    }
    workgroupBarrier();
    let scale = 1.0 / sqrt(part[0] / f32(K) + EPS);
    workgroupBarrier();
    return scale;
}
