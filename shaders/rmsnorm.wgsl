// RMSNorm: Y[r, :] (+)= X[r, :] / sqrt(mean(X[r, :]^2) + EPS) * G[:], for rows r < step.n_tokens * RPT.
// With ACCUM the result is added to Y: a post-norm residual add (Gemma: x += norm(attention or FFN output)).
// RPT (rows per token) is 1 for the usual norm over the hidden state, the head count for per-head norms (Q/K norm).
//
// Constants: K (row length), RPT (rows per token), EPS (epsilon, f32), ACCUM (bool).
// Bindings:
//   0 X: array<f32>      [rows, K]
//   1 G: array<f32>      [K] gain
//   2 Y: array<f32>      [rows, K] (a different buffer from X)
//   3 step: uniform Step
// Dispatch: (rows_max, 1, 1) workgroups of 64 threads, one row each; rows past the pass's end return at once.
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> G: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;

var<workgroup> sums: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let r = wid.x;
    if (r >= step.n_tokens * RPT) {
        return;
    }
    var s = 0.0;
    for (var k = tid; k < K; k += 64u) {
        let x = X[r * K + k];
        s += x * x;
    }
    sums[tid] = s;
    workgroupBarrier();
    for (var stride = 32u; stride > 0u; stride /= 2u) {
        if (tid < stride) {
            sums[tid] += sums[tid + stride];
        }
        workgroupBarrier();
    }
    let scale = 1.0 / sqrt(sums[0] / f32(K) + EPS);
    for (var k = tid; k < K; k += 64u) {
        let y = X[r * K + k] * scale * G[k];
        if (ACCUM) {
            Y[r * K + k] += y;
        } else {
            Y[r * K + k] = y;
        }
    }
}
