// Merge the S partial results of split decode attention (attention_decode.wgsl with S > 1) for each query head h:
//   M = max_s m_s,  w_s = exp(m_s - M),  out[h] = sum_s w_s PART[h, s] / sum_s w_s l_s
// (runs with no keys have m = -3e38 and l = 0, so their weight is 0 unless every run is empty, which cannot happen:
// the run holding the current position always has a key).
//
// Constants: QH, HD (a multiple of 4), S.
// Bindings:
//   0 PART: array<vec4<f32>>  [QH, S, HD / 4]
//   1 ML: array<vec2<f32>>    [QH, S] (m, l)
//   2 O: array<vec4<f32>>     [1, QH * HD / 4]
// Dispatch: (QH, 1, 1) workgroups of 64 threads; thread d handles values 4d .. 4d + 3 of the head (d < HD / 4).
@group(0) @binding(0) var<storage, read> PART: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> ML: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> O: array<vec4<f32>>;

const D4: u32 = HD / 4u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wid.x;
    var big = -3.0e38;
    for (var s = 0u; s < S; s++) {
        big = max(big, ML[h * S + s].x);
    }
    var total = 0.0;
    for (var s = 0u; s < S; s++) {
        let ml = ML[h * S + s];
        total += exp(ml.x - big) * ml.y;
    }
    for (var d = tid; d < D4; d += 64u) {
        var sum = vec4<f32>(0.0);
        for (var s = 0u; s < S; s++) {
            sum += exp(ML[h * S + s].x - big) * PART[(h * S + s) * D4 + d];
        }
        O[h * D4 + d] = sum / total;
    }
}
