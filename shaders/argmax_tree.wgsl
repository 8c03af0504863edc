// The workgroup argmax tree (included by argmax.wgsl, argmax_parts.wgsl, sample.wgsl and logprobs.wgsl): each of
// the workgroup's WG threads (WG a power of two, the includer's constant) writes a (value, index) pair to
// tree_v[tid], tree_i[tid]; then every thread calls argmax_tree(tid), and tree_v[0], tree_i[0] hold the largest
// value and, among equal values, the lowest index. The includer may use the two arrays for other reductions too.
var<workgroup> tree_v: array<f32, WG>;
var<workgroup> tree_i: array<u32, WG>;

fn argmax_tree(tid: u32) {
    workgroupBarrier();      // every pair is written
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (tid < s) {
            let ov = tree_v[tid + s];
            let oi = tree_i[tid + s];
            if (ov > tree_v[tid] || (ov == tree_v[tid] && oi < tree_i[tid])) {
                tree_v[tid] = ov;
                tree_i[tid] = oi;
            }
        }
        workgroupBarrier();
    }
}
