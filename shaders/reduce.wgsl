// Workgroup-wide reduction shared by the attention kernels (included by cera_web/kernels.py after the kernel).
// Needs the kernel's constant WG (threads per workgroup, a power of two). Every thread must call it (it has barriers);
// all get the result: the sum, or the maximum when is_max, of the threads' x.
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
