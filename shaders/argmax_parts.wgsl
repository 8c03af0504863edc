// First stage of a large vocabulary's greedy argmax: workgroup p finds the best of logits[p S .. (p + 1) S) (S = SLICE,
// the lowest index among equal maxima) and writes it as the pair (value, f32(index)); argmax.wgsl with PAIRS then
// picks the best of the PARTS pairs. Two dispatches of many threads instead of one workgroup scanning the whole
// vocabulary, which is bound by one chain of load latencies (a 128k vocabulary took ~100 us that way on an H200).
//
// Constants: V (vocabulary size), SLICE (logits a workgroup), PARTS = ceil(V / SLICE).
// Bindings:
//   0 logits: array<f32>       [V]
//   1 pairs: array<f32>        [2 PARTS]
// Dispatch: (PARTS, 1, 1) workgroups of 256 threads.
@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> pairs: array<f32>;

const WG: u32 = 256u;
//#include "argmax_tree.wgsl"

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let begin = wid.x * SLICE;
    let end = min(begin + SLICE, V);
    var bv = -3.4e38;
    var bi = 0xffffffffu;
    // in index order, strictly greater: within a thread the lowest index wins (SLICE / 256 loads, independent)
    for (var i = begin + tid; i < end; i += 256u) {
        let v = logits[i];
        if (v > bv) {
            bv = v;
            bi = i;
        }
    }
    tree_v[tid] = bv;
    tree_i[tid] = bi;
    argmax_tree(tid);
    if (tid == 0u) {
        pairs[2u * wid.x] = tree_v[0];
        pairs[2u * wid.x + 1u] = f32(select(tree_i[0], begin, tree_i[0] == 0xffffffffu));   // all -inf: its first id
    }
}
