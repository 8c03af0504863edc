// 8-bit activation blocks for the int8 GEMM (matmul_i8.wgsl), like llama.cpp's Q8 activations:
//   v = xin[t] (X[t], or rmsnorm(X[t]) * G with NORM), cut into blocks of 32; for each block
//   d = max|v| / 127, q_j = round(v_j / d) (WGSL round: ties to even; q = 0 for an all-zero block), s = d * sum_j q_j
//   (s serves formats whose weights have an offset: sum_j (a q_w + m) d q_j = a d sum q_w q_j + m s).
// Each workgroup quantizes one token: with NORM its threads first sum the squares of the row (strided vec4s, a tree
// through workgroup memory); then it goes along the row WG vec4s at a time, a thread a vec4 and 8 threads a block,
// the block's max |v| and sum q met in workgroup memory (no thread holds a block: a private array of 8 vec4s can
// land in local memory on NVIDIA's compiler, docs/DESIGN.md).
//
// Constants: K (a multiple of 32), NORM, EPS, WG (threads a workgroup, a power of two); kernels.quantize_rows.
// Bindings:
//   0 X: array<vec4<f32>>   [n_tokens, K]
//   1 Q: array<u32>         [n_tokens, K / 32, 10] blocks {d: f32, s: f32, q: 8 words of 4 int8 (low byte first)}
//   2 step: uniform Step
//   3 G: array<vec4<f32>>   [K] the norm's gain (read only with NORM; bind any buffer otherwise)
// Dispatch: (n_tokens_max, 1, 1) workgroups of WG threads; tokens past the pass's end return at once.
@group(0) @binding(0) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> Q: array<u32>;
@group(0) @binding(2) var<uniform> step: Step;
@group(0) @binding(3) var<storage, read> G: array<vec4<f32>>;

const K4: u32 = K / 4u;
const NB: u32 = K / 32u;

var<workgroup> part: array<f32, WG>;

//#include "rms_scale.wgsl"

fn pack4(q: vec4<f32>) -> u32 {
    let i = vec4<i32>(q);
    return (bitcast<u32>(i.x) & 0xFFu) | ((bitcast<u32>(i.y) & 0xFFu) << 8u)
         | ((bitcast<u32>(i.z) & 0xFFu) << 16u) | (bitcast<u32>(i.w) << 24u);
}

// The largest, or the sum, of the 8 values in part of thread tid's block (read after a barrier).
fn block_max(tid: u32) -> f32 {
    let b = tid & ~7u;
    return max(max(max(part[b], part[b + 1u]), max(part[b + 2u], part[b + 3u])),
               max(max(part[b + 4u], part[b + 5u]), max(part[b + 6u], part[b + 7u])));
}

fn block_sum(tid: u32) -> f32 {
    let b = tid & ~7u;
    return ((part[b] + part[b + 1u]) + (part[b + 2u] + part[b + 3u]))
         + ((part[b + 4u] + part[b + 5u]) + (part[b + 6u] + part[b + 7u]));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let t = wid.x;
    if (t >= step.n_tokens) {
        return;
    }
    let scale = rms_scale(t, tid);      // 1 without NORM
    for (var k0 = 0u; k0 < K4; k0 += WG) {             // K4 is a multiple of 8: a block is never cut
        let k = k0 + tid;                              // vec4 k: word k % 8 of block k / 8
        var x = vec4<f32>(0.0);
        if (k < K4) {
            x = X[t * K4 + k];
            if (NORM) {
                x = x * scale * G[k];
            }
        }
        let a = abs(x);
        part[tid] = max(max(a.x, a.y), max(a.z, a.w));
        workgroupBarrier();
        let d = block_max(tid) / 127.0;
        let q = round(x * select(0.0, 1.0 / d, d > 0.0));
        workgroupBarrier();
        part[tid] = q.x + q.y + q.z + q.w;
        workgroupBarrier();
        if (k < K4) {
            let o = (t * NB + k / 8u) * 10u;
            Q[o + 2u + k % 8u] = pack4(q);
            if (k % 8u == 0u) {
                Q[o] = bitcast<u32>(d);
                Q[o + 1u] = bitcast<u32>(d * block_sum(tid));
            }
        }
        workgroupBarrier();
    }
}
