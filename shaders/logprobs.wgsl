// Log-probabilities of a step, from the z that sample.wgsl drew from (logits + logit_bias, penalties, grammar mask;
// before temperature and truncation): lse = log(sum_i exp(z_i)); out = the drawn token's z - lse and the TOPN
// largest z_i - lse with their ids (descending; ties: lowest id first). Runs right after sample.wgsl in one plan.
//
// Constants: V (vocabulary size), TOPN (how many top entries, <= 20).
// Bindings:
//   0 z: array<f32>          [4 * ceil(V / 4)]  sample.wgsl's zout (masked tokens: -3.4e38)
//   1 tokens: array<u32>     [>= 1]  tokens[0] = the drawn id
//   2 step: uniform Step     out slot = step.out_index
//   3 out: array<f32>        [slots * (2 + 2 * TOPN)]  per slot: drawn logprob, n, then n (id as u32 bits, logprob)
// Dispatch: (1, 1, 1), one workgroup of 256 threads; each thread keeps its own sorted top TOPN in registers, then
// TOPN rounds of a workgroup max over the threads' heads merge them.
@group(0) @binding(0) var<storage, read> z: array<f32>;
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<uniform> step: Step;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 256u;
const LOW: f32 = -3.4e38;
const NONE: u32 = 0xffffffffu;

//#include "argmax_tree.wgsl"     // tree_v, tree_i: the argmax tree's, and tree_v the running maxima's
var<workgroup> red_s: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32) {
    var m = LOW;        // this thread's running max and sum of exp(z - m)
    var s = 0.0;
    var tv: array<f32, TOPN>;
    var ti: array<u32, TOPN>;
    for (var k = 0u; k < TOPN; k++) {
        tv[k] = LOW;
        ti[k] = NONE;
    }
    for (var i = tid; i < V; i += WG) {     // ascending ids: strictly greater keeps the lower id first on ties
        let v = z[i];
        if (v > m) {
            s = s * exp(m - v) + 1.0;
            m = v;
        } else {
            s += exp(v - m);
        }
        if (v > tv[TOPN - 1u] && v > LOW) {
            var k = TOPN - 1u;
            while (k > 0u && v > tv[k - 1u]) {
                tv[k] = tv[k - 1u];
                ti[k] = ti[k - 1u];
                k -= 1u;
            }
            tv[k] = v;
            ti[k] = i;
        }
    }
    tree_v[tid] = m;
    red_s[tid] = s;
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h /= 2u) {
        if (tid < h) {
            let m2 = max(tree_v[tid], tree_v[tid + h]);
            red_s[tid] = red_s[tid] * exp(tree_v[tid] - m2) + red_s[tid + h] * exp(tree_v[tid + h] - m2);
            tree_v[tid] = m2;
        }
        workgroupBarrier();
    }
    let lse = tree_v[0] + log(red_s[0]);
    let base = step.out_index * (2u + 2u * TOPN);
    workgroupBarrier();

    var head = 0u;
    var n = 0u;
    for (var r = 0u; r < TOPN; r++) {
        tree_v[tid] = select(LOW, tv[min(head, TOPN - 1u)], head < TOPN);
        tree_i[tid] = select(NONE, ti[min(head, TOPN - 1u)], head < TOPN);
        argmax_tree(tid);
        let best = tree_i[0];
        let bv = tree_v[0];
        if (best != NONE && head < TOPN && ti[min(head, TOPN - 1u)] == best) {
            head += 1u;
        }
        if (tid == 0u && best != NONE) {
            out[base + 2u + 2u * r] = bitcast<f32>(best);
            out[base + 3u + 2u * r] = bv - lse;
            n += 1u;
        }
        workgroupBarrier();
    }
    if (tid == 0u) {
        out[base] = z[tokens[0]] - lse;
        out[base + 1u] = f32(n);
    }
}
