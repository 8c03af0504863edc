// Adds split-K parts into a product's output (matmul_i8.wgsl with KS > 1):
//   Y[t, YOFF + n] (+)= sum_z P[z, t, n]   for n < N, t < n_tokens
//
// Constants: N, KS, TMAX (the parts' rows), YSTRIDE, YOFF, ACCUM.
// Bindings:
//   0 P: array<f32>     [KS, TMAX, N]
//   1 Y: array<f32>     [n_tokens, YSTRIDE]
//   2 step: uniform Step
// Dispatch: (ceil(N / 256), n_tokens_max, 1) workgroups of 256, a thread an output (kernels.sum_parts_groups).
@group(0) @binding(0) var<storage, read> P: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<uniform> step: Step;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = gid.x;
    let t = gid.y;
    if (n >= N || t >= step.n_tokens) {
        return;
    }
    var v = 0.0;
    for (var z = 0u; z < KS; z++) {
        v += P[(z * TMAX + t) * N + n];
    }
    let y = t * YSTRIDE + YOFF + n;
    if (ACCUM) {
        Y[y] += v;
    } else {
        Y[y] = v;
    }
}
