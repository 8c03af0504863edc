// Greedy sampling on the GPU: id = argmax_i logits[i] (the lowest index among equal maxima).
// Writes id to tokens[0] (the next pass's input) and to log[step.out_index] (read back after several steps).
// With PAIRS, the input is the per-slice winners of argmax_parts.wgsl instead: V pairs (value, f32(index)) in index
// order, and the answer is the index of the best pair (the second stage of a large vocabulary's argmax).
// With ROWS, one argmax per row of a pass's logits (speculative decoding's check of drafted tokens): workgroup r
// takes logits[r * V ..], writes log[r] and leaves tokens alone; rows r >= step.n_tokens do nothing.
//
// Constants: V (vocabulary size, or pairs with PAIRS), PAIRS, ROWS.
// Bindings:
//   0 logits: array<f32>       [V] ([2 V] with PAIRS, [rows, V] with ROWS)
//   1 tokens: array<u32>       [>= 1]
//   2 log: array<u32>          [max steps per readback]
//   3 step: uniform Step
// Dispatch: (1, 1, 1), one workgroup of 256 threads; with ROWS (rows, 1, 1).
@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> tokens: array<u32>;
@group(0) @binding(2) var<storage, read_write> log: array<u32>;
@group(0) @binding(3) var<uniform> step: Step;

const WG: u32 = 256u;
//#include "argmax_tree.wgsl"

fn keep_best(bv: ptr<function, f32>, bi: ptr<function, u32>, v: f32, i: u32) {
    if (v > *bv) {
        *bv = v;
        *bi = i;
    }
}

// Candidate i's value (of the row starting at base) and vocabulary index.
fn value(base: u32, i: u32) -> f32 {
    if (PAIRS) {
        return logits[2u * i];
    }
    return logits[base + i];
}

fn index(i: u32) -> u32 {
    if (PAIRS) {
        return u32(logits[2u * i + 1u]);     // exact: vocabularies are far below 2^24
    }
    return i;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    if (ROWS && wid.x >= step.n_tokens) {
        return;
    }
    let base = select(0u, wid.x * V, ROWS);
    var bv = -3.4e38;
    var bi = 0xffffffffu;
    // this thread's logits i = tid, tid + 256, ... in index order, four loads in flight at a time (the scan is
    // bound by load latency); strictly greater: within a thread the first (lowest) index wins
    var i = tid;
    for (; i + 768u < V; i += 1024u) {
        let a = value(base, i);
        let b = value(base, i + 256u);
        let c = value(base, i + 512u);
        let d = value(base, i + 768u);
        keep_best(&bv, &bi, a, index(i));
        keep_best(&bv, &bi, b, index(i + 256u));
        keep_best(&bv, &bi, c, index(i + 512u));
        keep_best(&bv, &bi, d, index(i + 768u));
    }
    for (; i < V; i += 256u) {
        keep_best(&bv, &bi, value(base, i), index(i));
    }
    tree_v[tid] = bv;
    tree_i[tid] = bi;
    argmax_tree(tid);
    if (tid == 0u && ROWS) {
        log[wid.x] = tree_i[0];
    } else if (tid == 0u) {
        tokens[0] = tree_i[0];
        log[step.out_index] = tree_i[0];
    }
}
