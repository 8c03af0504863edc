// Merges split prefill attention's parts (attention_tiled.wgsl with SPLIT > 1): for token t, head h, vec4 e of the
// head,
//   O[t, h, e] = sum_z P[z, t, h, e] e^(m_z - M) / sum_z l_z e^(m_z - M),   M = max_z m_z
// where split z's sums P and (m_z, l_z) cover its share of the keys (a split with none has m = -3e38, l = 0 and
// weight 0).
//
// Constants: HEADS, D4 (vec4s a head), SPLIT, TMAX (the parts' rows).
// Bindings:
//   0 P: array<vec4<f32>>   [SPLIT, TMAX, HEADS * D4] sums, then [SPLIT, TMAX, HEADS] (m, l, 0, 0)
//   1 O: array<vec4<f32>>   [n_tokens, HEADS * D4]
//   2 step: uniform Step
// Dispatch: (ceil(HEADS * D4 / 64), n_tokens_max, 1) workgroups of 64, a thread an output vec4
// (kernels.attention_combine_groups).
@group(0) @binding(0) var<storage, read> P: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> O: array<vec4<f32>>;
@group(0) @binding(2) var<uniform> step: Step;

const ROW: u32 = HEADS * D4;
const ML: u32 = SPLIT * TMAX * ROW;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let e = gid.x;
    let t = gid.y;
    if (e >= ROW || t >= step.n_tokens) {
        return;
    }
    let h = e / D4;
    var big = -3.0e38;
    for (var z = 0u; z < SPLIT; z++) {
        big = max(big, P[ML + (z * TMAX + t) * HEADS + h].x);
    }
    var num = vec4<f32>(0.0);
    var den = 0.0;
    for (var z = 0u; z < SPLIT; z++) {
        let ml = P[ML + (z * TMAX + t) * HEADS + h];
        let f = exp(ml.x - big);
        num += P[(z * TMAX + t) * ROW + e] * f;
        den += ml.y * f;
    }
    O[t * ROW + e] = num / den;
}
