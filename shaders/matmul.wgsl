// Batched matrix-vector product on packed weights, for t < step.n_tokens:
//   Y[t, YOFF + n] (+)= sum_k W[n, k] * xin[t, k]          with xin = X                      (NORM false)
//                                                          or  xin = rmsnorm(X[t]) * G       (NORM true)
//   GLU: Y[t, YOFF + n] = act(a) * b, a = W[n, :] · xin[t], b = W[N + n, :] · xin[t]  (gate and up rows stacked;
//        act: SiLU, or with GELU the tanh-approximated GELU: gate_act.wgsl)
// The weight format (F32, F16, Q4_0, Q4_1, Q8_0, k-quants, ...) is a separate file providing BLOCK and
// block_dot(row, b, x): the f32 dot product of block b of a row with xin(x ..), x a vec4 index into X.
// Fusing the RMSNorm, the residual add (ACCUM) and SwiGLU (GLU) here saves three dispatches per layer.
//
// Compile-time constants (prepended by cera_web/kernels.py):
//   K           row length (a multiple of the format's BLOCK)
//   N           output rows per token (with GLU: W holds 2N rows)
//   NORM, EPS   normalise each token's X row (RMSNorm with epsilon EPS, gain G) before use
//   ACCUM       Y += result (a residual add); otherwise Y = result
//   GLU, GELU   see above
//   LAST_ONLY   only the last token of the pass, written to row 0 (the LM head)
//   YSTRIDE     floats per row of Y (N unless several projections share one output buffer)
//   YOFF        column of Y where this projection's outputs start
//   TB          tokens per pass over the weights (1 for decode plans; 8 for prefill)
//   LANES       threads sharing a row (a power of two <= WG): 32 on GPUs (neighbouring threads read neighbouring
//               blocks), 1 on CPU adapters (SwiftShader, lavapipe), where barriers cost more than they save
//   RPT         rows per thread (TB must be 1 when > 1): a thread's blocks of RPT rows use the same inputs, so
//               each input load serves RPT rows (decode's matrix-vector products read the inputs far more often
//               than the weights otherwise)
//   WG          threads per workgroup (64, 128 or 256)
//   SG          reduce a row's lanes with subgroup shuffles instead of workgroup memory and barriers; only where
//               every subgroup has at least LANES invocations, numbered in order of local_invocation_index (the
//               caller checks the adapter's smallest subgroup size; kernels.build adds `enable subgroups;` and
//               shuffle_xor, which without SG is a stand-in that is never called)
// Bindings:
//   0 W: array<u32>              packed weights, N rows (2N with GLU)
//   1 X: array<vec4<f32>>        [n_tokens, K]
//   2 Y: array<f32>              [n_tokens, YSTRIDE]  ([1, YSTRIDE] with LAST_ONLY)
//   3 step: uniform Step
//   4 G: array<vec4<f32>>        [K] the norm's gain (read only with NORM; bind any buffer otherwise)
// Dispatch: ceil(N / ROWS) workgroups of WG threads (ROWS = WG / LANES * RPT rows each, kernels.matmul_groups),
// spread over x and y (flat_group); LANES threads a row (RPT rows), each striding over the row's blocks (and summing
// the squares of the X values it uses, for the norm); partial sums meet in subgroup shuffles or workgroup memory.
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;
@group(0) @binding(4) var<storage, read> G: array<vec4<f32>>;

const SLOTS: u32 = WG / LANES;   // row groups per workgroup
const ROWS: u32 = SLOTS * RPT;   // rows per workgroup
const NB: u32 = K / BLOCK;       // blocks per row
const K4: u32 = K / 4u;
const ACC: u32 = TB * RPT;       // accumulators a thread: acc[i * RPT + r] for token i of the pass, row r

var<workgroup> partial: array<array<vec4<f32>, ACC>, WG>;

// The input as the format's block_dot sees it: vec4 i of X, times the norm's gain. The norm's per-token scale
// 1/rms is a common factor of each output, applied once at the end.
fn xin(i: u32) -> vec4<f32> {
    if (NORM) {
        return X[i] * G[i % K4];
    }
    return X[i];
}

// Block b of a row's terms for token t: (W[row] · xin, with GLU W[row + N] · xin, the sum of squares of X there).
fn block_terms(row: u32, b: u32, t: u32) -> vec4<f32> {
    let x = t * K4 + b * (BLOCK / 4u);
    var d = vec4<f32>(block_dot(row, b, x), 0.0, 0.0, 0.0);
    if (GLU) {
        d.y = block_dot(row + N, b, x);
    }
    if (NORM) {
        for (var e = 0u; e < BLOCK / 4u; e++) {
            d.z += dot(X[x + e], X[x + e]);
        }
    }
    return d;
}

// Each thread accumulates, per token of the batch and row, a vec4 (its share of the row's dot product, of the GLU up
// row's, of the sum of squares of X for the norm, unused). A row's LANES threads together cover every block of the
// row, so one reduction over the lanes gives all three: one tree of barriers (or shuffles) instead of one each.
// Thread slot s of a workgroup owns rows group * ROWS + s + r * SLOTS, r < RPT (rows past N read row N - 1).
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let row0 = flat_group(wid, nwg) * ROWS + tid / LANES;
    let lane = tid % LANES;
    var rows: array<u32, RPT>;
    for (var r = 0u; r < RPT; r++) { rows[r] = min(row0 + r * SLOTS, N - 1u); }
    var t_begin = 0u;
    let t_end = step.n_tokens;
    if (LAST_ONLY) {
        t_begin = t_end - 1u;
    }
    for (var t0 = t_begin; t0 < t_end; t0 += TB) {
        var acc: array<vec4<f32>, ACC>;
        for (var i = 0u; i < ACC; i++) { acc[i] = vec4<f32>(0.0); }   // explicit: some compilers hoist vars
        // four of this thread's blocks at a time, so that their loads are in flight together (a long row is
        // otherwise bound by one load's latency after another), then the rest one by one
        var b = lane;
        for (; b + 3u * LANES < NB; b += 4u * LANES) {
            for (var i = 0u; i < TB; i++) {
                let t = t0 + i;
                if (t < t_end) {
                    for (var r = 0u; r < RPT; r++) {
                        let d0 = block_terms(rows[r], b, t);
                        let d1 = block_terms(rows[r], b + LANES, t);
                        let d2 = block_terms(rows[r], b + 2u * LANES, t);
                        let d3 = block_terms(rows[r], b + 3u * LANES, t);
                        acc[i * RPT + r] += (d0 + d1) + (d2 + d3);
                    }
                }
            }
        }
        for (; b < NB; b += LANES) {
            for (var i = 0u; i < TB; i++) {
                let t = t0 + i;
                if (t < t_end) {
                    for (var r = 0u; r < RPT; r++) {
                        acc[i * RPT + r] += block_terms(rows[r], b, t);
                    }
                }
            }
        }
        if (LANES > 1u) {
            if (SG) {
                // butterfly over the row's lanes: every lane ends with the row's sums
                for (var m = LANES / 2u; m > 0u; m /= 2u) {
                    for (var i = 0u; i < ACC; i++) { acc[i] += shuffle_xor(acc[i], m); }
                }
            } else {
                // reduce each row's LANES partial sums (rows are LANES consecutive threads)
                partial[tid] = acc;
                workgroupBarrier();
                for (var stride = LANES / 2u; stride > 0u; stride /= 2u) {
                    if (lane < stride) {
                        for (var i = 0u; i < ACC; i++) { partial[tid][i] += partial[tid + stride][i]; }
                    }
                    workgroupBarrier();
                }
                acc = partial[tid];
                workgroupBarrier();
            }
        }
        if (lane == 0u) {
            for (var r = 0u; r < RPT; r++) {
                let row = row0 + r * SLOTS;
                for (var i = 0u; i < TB; i++) {
                    let t = t0 + i;
                    if (row < N && t < t_end) {
                        let a = acc[i * RPT + r];
                        var out_row = t;
                        if (LAST_ONLY) { out_row = 0u; }
                        let y = out_row * YSTRIDE + YOFF + row;
                        var xscale = 1.0;
                        if (NORM) {
                            xscale = 1.0 / sqrt(a.z / f32(K) + EPS);
                        }
                        var v = a.x * xscale;
                        if (GLU) {
                            v = gate_act(v) * a.y * xscale;
                        }
                        if (ACCUM) {
                            Y[y] += v;
                        } else {
                            Y[y] = v;
                        }
                    }
                }
            }
        }
    }
}
