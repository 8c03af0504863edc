// Causal grouped-query attention over the KV cache, for each token t of the pass and each query head h:
//   n = step.pos0 + t + 1 (keys up to and including its own position), g = h / (HEADS / KV_HEADS),
//   out[t, h, :] = sum_j softmax_j(SCALE * Q[t, h, :] · Kc[j, g, :]) * Vc[j, g, :]   for j < n.
// Keys are taken in chunks of CHUNK with an online softmax (running max and sum), so any context length works
// with a fixed amount of workgroup memory.
//
// Constants: HEADS, KV_HEADS, HD (head size, at most 256), SCALE (f32, usually 1/sqrt(HD)).
// Bindings:
//   0 Q:   array<f32>     [n_tokens, HEADS * HD]
//   1 Kc:  array<f32>     [context, KV_HEADS * HD]   (rows < step.seq_len are filled)
//   2 Vc:  array<f32>     [context, KV_HEADS * HD]
//   3 O:   array<f32>     [n_tokens, HEADS * HD]
//   4 step: uniform Step
// Dispatch: (HEADS, n_tokens_max): one workgroup of 64 threads per (head, token); thread i owns output dims
// i, i + 64, ...; tokens past the pass's end return at once.
@group(0) @binding(0) var<storage, read> Q: array<f32>;
@group(0) @binding(1) var<storage, read> Kc: array<f32>;
@group(0) @binding(2) var<storage, read> Vc: array<f32>;
@group(0) @binding(3) var<storage, read_write> O: array<f32>;
@group(0) @binding(4) var<uniform> step: Step;

const CHUNK: u32 = 256u;
const DPT: u32 = (HD + 63u) / 64u;   // output dims per thread

var<workgroup> q: array<f32, HD>;
var<workgroup> p: array<f32, CHUNK>;
var<workgroup> red: array<f32, 64>;

fn reduce_max(tid: u32, v: f32) -> f32 {
    red[tid] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s /= 2u) {
        if (tid < s) { red[tid] = max(red[tid], red[tid + s]); }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn reduce_sum(tid: u32, v: f32) -> f32 {
    red[tid] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s /= 2u) {
        if (tid < s) { red[tid] += red[tid + s]; }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wid.x;
    let t = wid.y;
    if (t >= step.n_tokens) {
        return;
    }
    let g = h / (HEADS / KV_HEADS);
    let n = step.pos0 + t + 1u;
    let kv_stride = KV_HEADS * HD;
    for (var d = tid; d < HD; d += 64u) {
        q[d] = Q[t * HEADS * HD + h * HD + d];
    }
    workgroupBarrier();

    var m = -3.0e38;          // running max
    var l = 0.0;              // running sum of exp
    var acc: array<f32, DPT>;
    for (var c0 = 0u; c0 < n; c0 += CHUNK) {
        let cn = min(CHUNK, n - c0);
        var local_max = -3.0e38;
        for (var j = tid; j < cn; j += 64u) {
            let k = (c0 + j) * kv_stride + g * HD;
            var s = 0.0;
            for (var d = 0u; d < HD; d++) {
                s += q[d] * Kc[k + d];
            }
            s *= SCALE;
            p[j] = s;
            local_max = max(local_max, s);
        }
        let m_new = max(m, reduce_max(tid, local_max));
        var local_sum = 0.0;
        for (var j = tid; j < cn; j += 64u) {
            let e = exp(p[j] - m_new);
            p[j] = e;
            local_sum += e;
        }
        let alpha = exp(m - m_new);
        l = l * alpha + reduce_sum(tid, local_sum);   // the barriers inside also publish p[]
        for (var i = 0u; i < DPT; i++) {
            let d = tid + 64u * i;
            if (d < HD) {
                var a = acc[i] * alpha;
                for (var j = 0u; j < cn; j++) {
                    a += p[j] * Vc[(c0 + j) * kv_stride + g * HD + d];
                }
                acc[i] = a;
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    for (var i = 0u; i < DPT; i++) {
        let d = tid + 64u * i;
        if (d < HD) {
            O[t * HEADS * HD + h * HD + d] = acc[i] / l;
        }
    }
}
