// Causal grouped-query attention over the KV cache, for each token t of the pass and each query head h:
//   n = step.pos0 + t + 1 (keys up to and including its own position), g = h / (HEADS / KV_HEADS),
//   out[t, h, :] = sum_j softmax_j(SCALE * Q[t, h, :] · Kc[j, g, :]) * Vc[j, g, :]   for j < n.
// Keys are taken in chunks of CHUNK with an online softmax (running max and sum), so any context length works
// with a fixed amount of workgroup memory. Scores: one thread a key. Weighted values: the 256 threads form
// 256 / (HD/4) key groups, each thread summing one vec4 of the head over every (key group)-th key; the groups'
// partial sums meet once at the end.
//
// Constants: HEADS, KV_HEADS, HD (head size: a multiple of 4, at most 1024), SCALE (f32, usually 1/sqrt(HD)).
// Bindings:
//   0 Q:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]
//   1 Kc:  array<vec4<f32>>     [context, KV_HEADS * HD / 4]   (rows < step.seq_len are filled)
//   2 Vc:  array<vec4<f32>>     [context, KV_HEADS * HD / 4]
//   3 O:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]
//   4 step: uniform Step
// Dispatch: (HEADS, n_tokens_max): one workgroup of 256 threads per (head, token); tokens past the pass's end
// return at once.
@group(0) @binding(0) var<storage, read> Q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> Kc: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> Vc: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> O: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> step: Step;

const WG: u32 = 256u;
const CHUNK: u32 = 256u;
const D4: u32 = HD / 4u;          // vec4s a head
const VG: u32 = WG / D4;          // key groups in the value sum

var<workgroup> q: array<vec4<f32>, D4>;
var<workgroup> p: array<f32, CHUNK>;
var<workgroup> part: array<vec4<f32>, WG>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wid.x;
    let t = wid.y;
    if (t >= step.n_tokens) {
        return;
    }
    let g = h / (HEADS / KV_HEADS);
    let n = step.pos0 + t + 1u;
    let kv_stride = KV_HEADS * D4;
    for (var d = tid; d < D4; d += WG) {
        q[d] = Q[t * HEADS * D4 + h * D4 + d];
    }
    workgroupBarrier();

    let lane = tid % D4;              // this thread's vec4 of the head in the value sum
    let grp = tid / D4;               // and its key group
    var m = -3.0e38;                  // running max
    var l = 0.0;                      // running sum of exp
    var acc = vec4<f32>(0.0);
    for (var c0 = 0u; c0 < n; c0 += CHUNK) {
        let cn = min(CHUNK, n - c0);
        var local_max = -3.0e38;
        for (var j = tid; j < cn; j += WG) {
            let k = (c0 + j) * kv_stride + g * D4;
            var s = 0.0;
            for (var d = 0u; d < D4; d++) {
                s += dot(q[d], Kc[k + d]);
            }
            s *= SCALE;
            p[j] = s;
            local_max = max(local_max, s);
        }
        let m_new = max(m, reduce(tid, local_max, true));
        var local_sum = 0.0;
        for (var j = tid; j < cn; j += WG) {
            let e = exp(p[j] - m_new);
            p[j] = e;
            local_sum += e;
        }
        let alpha = exp(m - m_new);
        l = l * alpha + reduce(tid, local_sum, false);   // the barriers inside also publish p[]
        acc *= alpha;
        if (grp < VG) {
            acc = weigh_values(acc, c0, cn, grp, kv_stride, g * D4 + lane);
        }
        m = m_new;
        workgroupBarrier();
    }
    part[tid] = acc;
    workgroupBarrier();
    if (tid < D4) {
        var sum = vec4<f32>(0.0);
        for (var i = 0u; i < VG; i++) {
            sum += part[i * D4 + tid];
        }
        O[t * HEADS * D4 + h * D4 + tid] = sum / l;
    }
}
