// Decode attention with the Q/K/V post-processing fused in (one token; replaces rope_store + attention when
// decoding). For query head h, with g = h / (QH / KVH) its key/value head and p = step.pos0 the token's position:
//   q = rope(norm?(QKV[q head h] + B)),  k = rope(norm?(QKV[k head g] + B)),  v = QKV[v head g] + B
//   out[h] = sum_j softmax_j(SCALE * q · key_j) * value_j over j <= p, where key_j, value_j come from the cache
//   for j < p and are k, v themselves for j = p.
// The first query head of each group also stores k and v into the cache row p for later steps. Other workgroups of
// this dispatch never read row p from the cache, so there is no race. RoPE and the norm are as in rope_store.wgsl.
//
// Constants: QH, KVH, HD (<= 256, even), NEOX, QK_NORM, EPS, SCALE.
// Bindings:
//   0 QKV: array<f32>    [1, (QH + 2 KVH) * HD] the fused projection's output for this token
//   1 B: array<f32>      [(QH + 2 KVH) * HD] bias (zeros when none)
//   2 NG: array<f32>     [2 * HD] q-norm gain then k-norm gain (read only with QK_NORM)
//   3 FREQ: array<f32>   [HD / 2]
//   4 Kc: array<f32>     [context, KVH * HD]
//   5 Vc: array<f32>     [context, KVH * HD]
//   6 O: array<f32>      [1, QH * HD]
//   7 step: uniform Step (n_tokens must be 1)
// Dispatch: (QH, 1, 1): one workgroup of 64 threads per query head.
@group(0) @binding(0) var<storage, read> QKV: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read> NG: array<f32>;
@group(0) @binding(3) var<storage, read> FREQ: array<f32>;
@group(0) @binding(4) var<storage, read_write> Kc: array<f32>;
@group(0) @binding(5) var<storage, read_write> Vc: array<f32>;
@group(0) @binding(6) var<storage, read_write> O: array<f32>;
@group(0) @binding(7) var<uniform> step: Step;

const CHUNK: u32 = 256u;
const DPT: u32 = (HD + 63u) / 64u;   // output dims per thread

var<workgroup> q: array<f32, HD>;
var<workgroup> k: array<f32, HD>;
var<workgroup> v: array<f32, HD>;
var<workgroup> p: array<f32, CHUNK>;
var<workgroup> red: array<f32, 64>;

fn reduce(tid: u32, x: f32, is_max: bool) -> f32 {
    red[tid] = x;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s /= 2u) {
        if (tid < s) {
            red[tid] = select(red[tid] + red[tid + s], max(red[tid], red[tid + s]), is_max);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

// Load head `head` of QKV (+ bias) into h, optionally RMS-normalise it with gain NG[gain ..], and rotate it.
fn prepare(tid: u32, head: u32, gain: u32, rotate: bool, which: u32) {
    var ss = 0.0;
    for (var d = tid; d < HD; d += 64u) {
        let x = QKV[head * HD + d] + B[head * HD + d];
        if (which == 0u) { q[d] = x; } else if (which == 1u) { k[d] = x; } else { v[d] = x; }
        ss += x * x;
    }
    workgroupBarrier();
    if (!rotate) {
        return;
    }
    var scale = 1.0;
    if (QK_NORM) {
        scale = 1.0 / sqrt(reduce(tid, ss, false) / f32(HD) + EPS);
    }
    let pos = f32(step.pos0);
    for (var i = tid; i < HD / 2u; i += 64u) {
        var i0 = 2u * i;
        var i1 = i0 + 1u;
        if (NEOX) {
            i0 = i;
            i1 = i + HD / 2u;
        }
        var g0 = 1.0;
        var g1 = 1.0;
        if (QK_NORM) {
            g0 = NG[gain + i0] * scale;
            g1 = NG[gain + i1] * scale;
        }
        let a = pos * FREQ[i];
        let c = cos(a);
        let s = sin(a);
        if (which == 0u) {
            let x0 = q[i0] * g0;
            let x1 = q[i1] * g1;
            q[i0] = x0 * c - x1 * s;
            q[i1] = x0 * s + x1 * c;
        } else {
            let x0 = k[i0] * g0;
            let x1 = k[i1] * g1;
            k[i0] = x0 * c - x1 * s;
            k[i1] = x0 * s + x1 * c;
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wid.x;
    let g = h / (QH / KVH);
    let pos = step.pos0;
    prepare(tid, h, 0u, true, 0u);
    prepare(tid, QH + g, HD, true, 1u);
    prepare(tid, QH + KVH + g, 0u, false, 2u);
    let kv_stride = KVH * HD;
    if (h % (QH / KVH) == 0u) {           // one workgroup per group stores this position's k and v
        for (var d = tid; d < HD; d += 64u) {
            Kc[pos * kv_stride + g * HD + d] = k[d];
            Vc[pos * kv_stride + g * HD + d] = v[d];
        }
    }
    let n = pos + 1u;
    var m = -3.0e38;
    var l = 0.0;
    var acc: array<f32, DPT>;
    for (var i = 0u; i < DPT; i++) { acc[i] = 0.0; }
    for (var c0 = 0u; c0 < n; c0 += CHUNK) {
        let cn = min(CHUNK, n - c0);
        var local_max = -3.0e38;
        for (var j = tid; j < cn; j += 64u) {
            var s = 0.0;
            if (c0 + j == pos) {
                for (var d = 0u; d < HD; d++) { s += q[d] * k[d]; }
            } else {
                let row = (c0 + j) * kv_stride + g * HD;
                for (var d = 0u; d < HD; d++) { s += q[d] * Kc[row + d]; }
            }
            s *= SCALE;
            p[j] = s;
            local_max = max(local_max, s);
        }
        let m_new = max(m, reduce(tid, local_max, true));
        var local_sum = 0.0;
        for (var j = tid; j < cn; j += 64u) {
            let e = exp(p[j] - m_new);
            p[j] = e;
            local_sum += e;
        }
        let alpha = exp(m - m_new);
        l = l * alpha + reduce(tid, local_sum, false);    // the barriers inside also publish p[]
        for (var i = 0u; i < DPT; i++) {
            let d = tid + 64u * i;
            if (d < HD) {
                var a = acc[i] * alpha;
                for (var j = 0u; j < cn; j++) {
                    var value = 0.0;
                    if (c0 + j == pos) {
                        value = v[d];
                    } else {
                        value = Vc[(c0 + j) * kv_stride + g * HD + d];
                    }
                    a += p[j] * value;
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
            O[h * HD + d] = acc[i] / l;
        }
    }
}
