// Batched matrix-vector product on packed weights:  Y[t, n] (+)= sum_k W[n, k] * X[t, k]   for t < step.n_tokens.
// The weight format (F32, F16, Q4_0, Q4_1, Q8_0, ...) is a separate file providing BLOCK and block_dot(row, b, x),
// the f32 dot product of one block of a row with the matching slice of X.
//
// Compile-time constants (prepended by cera_web/kernels.py):
//   K           row length (a multiple of the format's BLOCK)
//   N           rows (outputs per token)
//   ACCUM       true: Y += W·X (a residual add fused into the projection); false: Y = W·X
//   OUT_AT_POS  true: token t is written to row step.pos0 + t of Y (K/V straight into the cache)
//   LAST_ONLY   true: only the last token of the pass, written to row 0 (the LM head)
//   TB          tokens per pass over the weights (1 for decode plans; 8 for prefill)
//   LANES       threads sharing a row (a power of two <= 64): 32 on GPUs (neighbouring threads read neighbouring
//               blocks), 1 on CPU adapters (SwiftShader, lavapipe), where barriers cost more than they save
// Bindings:
//   0 W: array<u32>              packed weights, N rows
//   1 X: array<vec4<f32>>        [n_tokens, K]
//   2 Y: array<f32>              [n_tokens, N] (or [context, N] with OUT_AT_POS, or [1, N] with LAST_ONLY)
//   3 step: uniform Step
// Dispatch: ceil(N / (64 / LANES)) workgroups of 64 threads, spread over x and y (flat_group); LANES threads a row,
// each striding over the row's blocks; partial sums meet in workgroup memory.
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;

const ROWS: u32 = 64u / LANES;   // rows per workgroup
const NB: u32 = K / BLOCK;       // blocks per row

var<workgroup> partial: array<array<f32, TB>, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let row = flat_group(wid, nwg) * ROWS + tid / LANES;
    let lane = tid % LANES;
    let valid = row < N;
    var t_begin = 0u;
    let t_end = step.n_tokens;
    if (LAST_ONLY) {
        t_begin = t_end - 1u;
    }
    for (var t0 = t_begin; t0 < t_end; t0 += TB) {
        var acc: array<f32, TB>;
        for (var i = 0u; i < TB; i++) { acc[i] = 0.0; }   // explicit: some compilers hoist loop-local vars
        if (valid) {
            for (var b = lane; b < NB; b += LANES) {
                for (var i = 0u; i < TB; i++) {
                    let t = t0 + i;
                    if (t < t_end) {
                        acc[i] += block_dot(row, b, (t * K + b * BLOCK) / 4u);
                    }
                }
            }
        }
        if (LANES > 1u) {
            partial[tid] = acc;
            workgroupBarrier();
            for (var stride = LANES / 2u; stride > 0u; stride /= 2u) {
                if (lane < stride) {
                    for (var i = 0u; i < TB; i++) {
                        partial[tid][i] += partial[tid + stride][i];
                    }
                }
                workgroupBarrier();
            }
            acc = partial[tid];
            workgroupBarrier();
        }
        if (valid && lane == 0u) {
            for (var i = 0u; i < TB; i++) {
                let t = t0 + i;
                if (t < t_end) {
                    var out_row = t;
                    if (OUT_AT_POS) { out_row = step.pos0 + t; }
                    if (LAST_ONLY) { out_row = 0u; }
                    let y = out_row * N + row;
                    if (ACCUM) {
                        Y[y] += acc[i];
                    } else {
                        Y[y] = acc[i];
                    }
                }
            }
        }
    }
}
