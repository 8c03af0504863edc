// After the fused Q/K/V projection: per head and token, add the bias, optionally RMS-normalise the head (QK norm of
// Qwen3 / LFM2), rotate it (RoPE) and store it where attention reads it:
//   q heads -> Q[t, head]; k heads -> Kc[step.pos0 + t, head]; v heads (bias only) -> Vc[step.pos0 + t, head].
// RoPE, for position p = step.pos0 + t and pair i < HD/2 with angle a = p * FREQ[i]:
//   NEOX false (GGUF llama layout): the pair is (x[2i], x[2i+1]);  NEOX true: (x[i], x[i + HD/2]);
//   (x0, x1) <- (x0 cos a - x1 sin a, x0 sin a + x1 cos a).
//
// Constants: QH, KVH (query and key/value head counts), HD (head size, <= 256, even), NEOX, QK_NORM, EPS;
//   KVT, the cache's element type (f32, or f16 with the shader-f16 feature: values rounded to the nearest half).
// Bindings:
//   0 QKV: array<f32>    [n_tokens, (QH + 2 KVH) * HD]  the projection's output (q heads, then k, then v)
//   1 B: array<f32>      [(QH + 2 KVH) * HD]  bias (zeros when the model has none)
//   2 NG: array<f32>     [2 * HD]  q-norm gain then k-norm gain (read only with QK_NORM)
//   3 FREQ: array<f32>   [HD / 2]  rotation frequencies (theta^(-2i/HD), with any rope scaling)
//   4 Q: array<f32>      [n_tokens, QH * HD]
//   5 Kc: array<KVT>     [context, KVH * HD]
//   6 Vc: array<KVT>     [context, KVH * HD]
//   7 step: uniform Step
// Dispatch: (QH + 2 KVH, n_tokens_max): one workgroup of 64 threads per (head, token).
@group(0) @binding(0) var<storage, read> QKV: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read> NG: array<f32>;
@group(0) @binding(3) var<storage, read> FREQ: array<f32>;
@group(0) @binding(4) var<storage, read_write> Q: array<f32>;
@group(0) @binding(5) var<storage, read_write> Kc: array<KVT>;
@group(0) @binding(6) var<storage, read_write> Vc: array<KVT>;
@group(0) @binding(7) var<uniform> step: Step;

const ROW: u32 = (QH + 2u * KVH) * HD;

var<workgroup> h: array<f32, HD>;
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let head = wid.x;
    let t = wid.y;
    if (t >= step.n_tokens) {
        return;
    }
    let pos = step.pos0 + t;
    for (var d = tid; d < HD; d += 64u) {
        h[d] = QKV[t * ROW + head * HD + d] + B[head * HD + d];
    }
    workgroupBarrier();
    if (head >= QH + KVH) {                                   // a v head: store as is
        let g = head - QH - KVH;
        for (var d = tid; d < HD; d += 64u) {
            Vc[pos * KVH * HD + g * HD + d] = KVT(h[d]);
        }
        return;
    }
    let is_k = head >= QH;
    if (QK_NORM) {
        var ss = 0.0;
        for (var d = tid; d < HD; d += 64u) { ss += h[d] * h[d]; }
        red[tid] = ss;
        workgroupBarrier();
        for (var s = 32u; s > 0u; s /= 2u) {
            if (tid < s) { red[tid] += red[tid + s]; }
            workgroupBarrier();
        }
        let scale = 1.0 / sqrt(red[0] / f32(HD) + EPS);
        let gain = select(0u, HD, is_k);
        workgroupBarrier();
        for (var d = tid; d < HD; d += 64u) { h[d] = h[d] * scale * NG[gain + d]; }
        workgroupBarrier();
    }
    for (var i = tid; i < HD / 2u; i += 64u) {
        var i0 = 2u * i;
        var i1 = i0 + 1u;
        if (NEOX) {
            i0 = i;
            i1 = i + HD / 2u;
        }
        let a = f32(pos) * FREQ[i];
        let c = cos(a);
        let s = sin(a);
        let x0 = h[i0];
        let x1 = h[i1];
        var out0 = 0u;
        if (is_k) {
            out0 = pos * KVH * HD + (head - QH) * HD;
            Kc[out0 + i0] = KVT(x0 * c - x1 * s);
            Kc[out0 + i1] = KVT(x0 * s + x1 * c);
        } else {
            out0 = t * QH * HD + head * HD;
            Q[out0 + i0] = x0 * c - x1 * s;
            Q[out0 + i1] = x0 * s + x1 * c;
        }
    }
}
