// Pieces of the decode attention kernel (attention_decode.wgsl; included by cera_web/kernels.py after the kernel). They use the kernel's WG (threads per workgroup, a power of two), VG (key groups of the value
// sum), its value cache Vc: array<vec4<f32>> and its probabilities p: array<f32, CHUNK>.

// Workgroup-wide reduction. Every thread must call it (it has barriers); all get the result: the sum, or the maximum
// when is_max, of the threads' x. (A two-level version with 2 barriers instead of 8 measured no faster on the H200.)
var<workgroup> red: array<f32, WG>;

fn reduce(tid: u32, x: f32, is_max: bool) -> f32 {
    red[tid] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (tid < s) {
            red[tid] = select(red[tid] + red[tid + s], max(red[tid], red[tid + s]), is_max);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

// acc + sum of p[j] * Vc[(c0 + j) * stride + col] over the keys j < cn of key group grp (j = grp, grp + VG, ...):
// one thread's vec4 of the weighted value sum for a chunk of keys starting at c0. Four keys are loaded at a time,
// into four accumulators, so four loads are in flight instead of one (the loop is otherwise bound by their latency).
fn weigh_values(acc: vec4<f32>, c0: u32, cn: u32, grp: u32, stride: u32, col: u32) -> vec4<f32> {
    var a0 = acc;
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    var j = grp;
    for (; j + 3u * VG < cn; j += 4u * VG) {
        let v0 = Vc[(c0 + j) * stride + col];
        let v1 = Vc[(c0 + j + VG) * stride + col];
        let v2 = Vc[(c0 + j + 2u * VG) * stride + col];
        let v3 = Vc[(c0 + j + 3u * VG) * stride + col];
        a0 += p[j] * v0;
        a1 += p[j + VG] * v1;
        a2 += p[j + 2u * VG] * v2;
        a3 += p[j + 3u * VG] * v3;
    }
    for (; j < cn; j += VG) {
        a0 += p[j] * Vc[(c0 + j) * stride + col];
    }
    return (a0 + a1) + (a2 + a3);
}
