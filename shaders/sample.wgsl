// Sampling on the GPU: one token id from the logits row, with repetition penalty, temperature, top-k, top-p and
// min-p, drawn with a random number derived from (seed, position). Writes the id to tokens[0] (the next pass's input),
// to log[step.out_index] (read back after several steps) and to the recent-token ring (for later penalties).
//
// What it computes (the same semantics as cera_web.sampling.sample_numpy, the host-side specification):
//   1. l_i = logits_i + bias_i (params.biased: OpenAI's logit_bias, dense in cons[MW..MW+V)); z_i = l_i, except for
//      the tokens among the last `window` tokens of the sequence (the ring, prompt included), c_i times each:
//      z = l / penalty when l > 0, else l * penalty (llama.cpp's repeat penalty), then
//      z -= c_i * frequency + presence (OpenAI's frequency and presence penalties).
//      (params.masked) tokens whose bit in the mask cons[0..MW) is 0 (a grammar forbids them) then get
//      z_i = -3.4e38, so they are never the argmax and their p_i is 0: never kept, never drawn.
//      (params.logprobs) z is also written to zout, for logprobs.wgsl.
//   2. temperature <= 0 or top_k == 1: the id is argmax_i z_i (the lowest index among equal maxima); done.
//   3. p_i = exp((z_i - max z) / temperature): unnormalised probabilities, the most likely token has p = 1.
//   4. thresholds on p (a token is kept when p_i >= all three; ties at a threshold are all kept):
//        top-k  t_k = the k-th largest p (0 = off);
//        top-p  t_p = the largest t such that the mass of {p_i >= max(t, t_k)} is >= top_p * mass{p_i >= t_k}
//               (the smallest set of most likely tokens holding top_p of the top-k set's probability);
//        min-p  t_m = min_p * (the largest p, which is 1).
//   5. with u in [0, 1) from hash(seed, position), the id is the first kept index (in index order) at which the
//      running sum of kept p exceeds u * (their total): inverse-CDF sampling.
//
// Algorithm (one workgroup; sums run in a fixed order, so a run reproduces bit for bit). Passes over the vocabulary
// are what costs (each is latency-bound for one workgroup), so the common case makes three:
//   P1  z (penalties through a hash set of the window's tokens in workgroup memory) -> work; max and argmax.
//   P2  p -> work; the total mass M; counts of p per power of two for p >= 2^-15 (16 bins).
//   From the bins, a cutoff c <= the final threshold that at most CAP tokens reach: bin counts bound the k-th
//   largest p (top-k), count * 2^-b bounds the mass above a bin (top-p, whose target uses M), and min_p is itself
//   one. (With top-k and top-p both on, c comes from top-k alone, so the list holds the whole top-k set.)
//   Fast path, when such a c exists:
//   P3  the tokens with p >= c -> a candidate list in workgroup memory; bitonic sort by (p desc, id asc); the
//       thresholds are positions in the sorted list (prefix sums, binary search); the kept prefix is sorted by id
//       and the draw is a binary search of its prefix sums.
//   Otherwise (flat or long-tailed distributions): thresholds by radix select over the 32-bit keys of p (p >= 0,
//   so its bits order like it): 8 levels of 4 bits, each histogramming (counts for top-k, mass for top-p) the
//   elements that share the bits decided so far; then each thread sums the kept mass of a contiguous block, an
//   in-order scan gives block offsets, and the thread whose block holds u * total walks it.
//
// Constants: V (vocabulary size), RING (recent-token ring length, <= 1024), PROBE (tests: tokens[1] = 1 after the
// fast path, 2 after the fallback; tokens must then hold 2 words).
// Bindings:
//   0 logits: array<f32>              [V]  the last position's logits
//   1 tokens: array<u32>              [>= 1]  tokens[0] receives the id
//   2 log: array<u32>                 [max steps per readback]  log[step.out_index] receives the id
//   3 step: uniform Step              the id is for position step.seq_len
//   4 params: uniform Sample          see below (written by the host once per generation)
//   5 ring: array<u32>                [RING]  ring[p % RING] = the token at position p (host writes the prompt's,
//                                              this kernel writes each sampled one)
//   6 work: array<vec4<f32>>          [ceil(V / 4)]  scratch: z, then p (past V: z = -3.4e38, p = 0)
//   7 logits4: array<vec4<f32>>       the logits buffer again, read 4 at a time (its whole vec4s: V / 4)
//   8 cons: array<u32>                [MW + V]  MW = ceil(V / 32) mask words (bit i % 32 of cons[i / 32]: token i
//                                              allowed; read when masked), then V f32 biases (read when biased)
//   9 zout: array<vec4<f32>>          [ceil(V / 4)]  z (written when logprobs)
// Dispatch: (1, 1, 1), one workgroup of 256 threads. Workgroup memory: about 15 KiB.
// Each thread reads two vec4s per loop iteration, so loads overlap: one workgroup is otherwise latency-bound.

struct Sample {
    temperature: f32,   // <= 0: greedy
    top_k: u32,         // 0 or >= V: off
    top_p: f32,         // >= 1: off
    min_p: f32,         // 0: off
    penalty: f32,       // 1: off
    window: u32,        // how many of the latest tokens the penalty covers (<= RING)
    seed_lo: u32,
    seed_hi: u32,
    masked: u32,        // 1: apply the mask (binding 8)
    biased: u32,        // 1: add the biases (binding 8)
    frequency: f32,     // 0: off
    presence: f32,      // 0: off
    logprobs: u32,      // 1: write z to zout
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> tokens: array<u32>;
@group(0) @binding(2) var<storage, read_write> log: array<u32>;
@group(0) @binding(3) var<uniform> step: Step;
@group(0) @binding(4) var<uniform> params: Sample;
@group(0) @binding(5) var<storage, read_write> ring: array<u32>;
@group(0) @binding(6) var<storage, read_write> work: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read> logits4: array<vec4<f32>>;     // the same buffer as logits
@group(0) @binding(8) var<storage, read> cons: array<u32>;
@group(0) @binding(9) var<storage, read_write> zout: array<vec4<f32>>;

const WG: u32 = 256u;
const BINS: u32 = 16u;          // radix digit values; also the fast path's powers of two
const CAP: u32 = 1024u;         // candidates the fast path holds (4 per thread)
const TAB: u32 = 2048u;         // penalty hash set slots (the window's <= 1024 tokens fill at most half)
const NONE: u32 = 0xffffffffu;
const V4: u32 = (V + 3u) / 4u;  // vec4s of work
const VF: u32 = V / 4u;         // whole vec4s of logits
const VL: u32 = max(VF, 1u) - 1u;   // the last of them (clamped reads)
const LOW: f32 = -3.4e38;
const MW: u32 = (V + 31u) / 32u;    // mask words in cons
const KEY: u32 = 0xfffffu;          // penalty set slot: token + 1 in the low 20 bits, its count above

// P1-P2: the penalty hash set (token + 1; 0 = empty). Fast path: the candidate list, key (bits of p) in [0, CAP),
// token id in [CAP, 2 CAP). (WGSL has no unions: both live in one atomic array, read with atomicLoad/atomicStore.)
var<workgroup> tab: array<atomic<u32>, 2048>;
//#include "argmax_tree.wgsl"                // tree_v, tree_i: the argmax tree's, and tree_v the scans' scratch
var<workgroup> hist: array<f32, 1024>;    // radix: [BINS][64] folded histograms; fast path: prefix sums
var<workgroup> bins: array<f32, 16>;
var<workgroup> counts: array<atomic<u32>, 16>;
var<workgroup> n_cand: atomic<u32>;
var<workgroup> sel_u: array<u32, 4>;      // radix: decided key bits; drawn id; fast path: cutoff; list length
var<workgroup> sel_f: array<f32, 3>;      // radix: weight above the current bucket, target; total mass
var<workgroup> uni: u32;                  // a value thread 0 decided, for workgroupUniformLoad

// PCG hash (O'Neill's output permutation on one LCG step). cera_web.sampling.uniform mirrors it.
fn pcg(v: u32) -> u32 {
    let s = v * 747796405u + 2891336453u;
    let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
    return (w >> 22u) ^ w;
}

fn uniform01(pos: u32) -> f32 {
    let h = pcg(params.seed_lo ^ pcg(params.seed_hi ^ pcg(pos)));
    return f32(h >> 8u) * (1.0 / 16777216.0);     // 24 random bits: exactly representable, in [0, 1)
}

// -- the penalty hash set ----------------------------------------------------------------------------------------

fn slot(t: u32) -> u32 {
    return (t * 2654435761u) >> 21u;        // Fibonacci hashing to 11 bits (TAB = 2048)
}

fn penalise(i: u32, l: f32) -> f32 {
    var h = slot(i);
    var v = atomicLoad(&tab[h]);
    while (v != 0u && (v & KEY) != i + 1u) {     // linear probing; the set is at most half full
        h = (h + 1u) & (TAB - 1u);
        v = atomicLoad(&tab[h]);
    }
    if (v == 0u) {
        return l;
    }
    let c = f32(v >> 20u);
    return select(l * params.penalty, l / params.penalty, l > 0.0) - (c * params.frequency + params.presence);
}

// -- the candidate list (fast path) --------------------------------------------------------------------------------

fn key_at(j: u32) -> u32 {
    return atomicLoad(&tab[j]);
}

fn id_at(j: u32) -> u32 {
    return atomicLoad(&tab[CAP + j]);
}

// Whether entry (ka, ia) sorts before (kb, ib): by p descending then id ascending, or (by_id) by id ascending.
fn before(ka: u32, ia: u32, kb: u32, ib: u32, by_id: bool) -> bool {
    if (by_id) {
        return ia < ib;
    }
    return ka > kb || (ka == kb && ia < ib);
}

// Bitonic sort of the first n entries (n uniform), padded up to the next power of two with entries that sort last.
fn sort_list(tid: u32, n: u32, by_id: bool) {
    let n2 = next_pow2(n);
    for (var j = n + tid; j < n2; j += WG) {
        atomicStore(&tab[j], 0u);
        atomicStore(&tab[CAP + j], NONE);
    }
    workgroupBarrier();
    for (var k = 2u; k <= n2; k <<= 1u) {
        for (var j = k >> 1u; j > 0u; j >>= 1u) {
            for (var i = tid; i < n2; i += WG) {
                let l = i ^ j;
                if (l > i) {
                    let ki = key_at(i);
                    let ii = id_at(i);
                    let kl = key_at(l);
                    let il = id_at(l);
                    let up = (i & k) == 0u;
                    if ((up && before(kl, il, ki, ii, by_id)) || (!up && before(ki, ii, kl, il, by_id))) {
                        atomicStore(&tab[i], kl);
                        atomicStore(&tab[CAP + i], il);
                        atomicStore(&tab[l], ki);
                        atomicStore(&tab[CAP + l], ii);
                    }
                }
            }
            workgroupBarrier();
        }
    }
}

// hist[j] = sum of p over entries 0..j of the list, for j < n (each thread owns 4 consecutive entries).
fn prefix_sums(tid: u32, n: u32) {
    let j0 = tid * 4u;
    var s = 0.0;
    for (var e = 0u; e < 4u; e++) {
        let j = j0 + e;
        if (j < n) {
            s += bitcast<f32>(key_at(j));
            hist[j] = s;
        }
    }
    tree_v[tid] = s;
    workgroupBarrier();
    if (tid < 16u) {                        // 16 groups of 16 threads: exclusive offsets inside each group
        var c = 0.0;
        for (var t = tid * 16u; t < tid * 16u + 16u; t++) {
            let v = tree_v[t];
            tree_v[t] = c;
            c += v;
        }
        bins[tid] = c;
    }
    workgroupBarrier();
    if (tid == 0u) {
        var c = 0.0;
        for (var g = 0u; g < 16u; g++) {
            let v = bins[g];
            bins[g] = c;
            c += v;
        }
    }
    workgroupBarrier();
    let offset = bins[tid / 16u] + tree_v[tid];
    for (var e = 0u; e < 4u; e++) {
        let j = j0 + e;
        if (j < n) {
            hist[j] += offset;
        }
    }
    workgroupBarrier();
}

// Entries of the sorted list (descending keys) with key >= t: binary search.
fn count_at_least(n: u32, t: u32) -> u32 {
    var lo = 0u;
    var hi = n;
    while (lo < hi) {
        let mid = (lo + hi) / 2u;
        if (key_at(mid) >= t) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// The first j < n with hist[j] >= x (strict: hist[j] > x), or n.
fn first_reaching(n: u32, x: f32, strict: bool) -> u32 {
    var lo = 0u;
    var hi = n;
    while (lo < hi) {
        let mid = (lo + hi) / 2u;
        let v = hist[mid];
        if (v > x || (!strict && v == x)) {
            hi = mid;
        } else {
            lo = mid + 1u;
        }
    }
    return lo;
}

fn next_pow2(n: u32) -> u32 {
    var p = 2u;
    while (p < n) {
        p <<= 1u;
    }
    return p;
}

// -- radix select (fallback path) ------------------------------------------------------------------------------------

// Largest key t such that the weight of {i : key_i >= t, key_i >= floor} reaches the target, where key_i are the
// bits of work[i] (p_i >= 0). count: weight 1 and target = want; mass: weight p_i and target = want * total weight.
// Bins with zero weight are never chosen, so t is always the key of a real element when any has weight.
fn radix_select(tid: u32, floor: u32, mass: bool, want: f32) -> u32 {
    if (tid == 0u) {
        sel_u[0] = 0u;
        sel_f[0] = 0.0;
        sel_f[1] = want;
    }
    workgroupBarrier();
    for (var level = 0u; level < 8u; level++) {
        let shift = 28u - 4u * level;
        let hi_mask = select(0xffffffffu << (shift + 4u), 0u, level == 0u);   // bits decided by earlier levels
        let prefix = sel_u[0] & hi_mask;
        // explicit zeros: every level starts from an empty histogram (naga hoists a bare declaration out of the
        // loop and would not clear it again)
        var h = array<f32, 16>();
        for (var q = tid; q < V4; q += WG) {
            let p4 = work[q];
            for (var e = 0u; e < 4u; e++) {
                let p = p4[e];
                let k = bitcast<u32>(p);
                if (k >= floor && (k & hi_mask) == prefix && 4u * q + e < V) {
                    let d = (k >> shift) & 15u;
                    h[d] += select(1.0, p, mass);
                }
            }
        }
        // fold the 256 private histograms: 4 rounds of 64 threads into hist[d][0..64), then 64 -> 16 -> 1
        for (var r = 0u; r < 4u; r++) {
            if (tid / 64u == r) {
                for (var d = 0u; d < BINS; d++) {
                    let a = d * 64u + (tid & 63u);
                    hist[a] = select(hist[a] + h[d], h[d], r == 0u);
                }
            }
            workgroupBarrier();
        }
        let d4 = tid / 16u;
        let j4 = (tid & 15u) * 4u;
        tree_v[tid] = hist[d4 * 64u + j4] + hist[d4 * 64u + j4 + 1u] + hist[d4 * 64u + j4 + 2u]
                   + hist[d4 * 64u + j4 + 3u];
        workgroupBarrier();
        if (tid < BINS) {
            var s = 0.0;
            for (var j = 0u; j < 16u; j++) {
                s += tree_v[tid * 16u + j];
            }
            bins[tid] = s;
        }
        workgroupBarrier();
        if (tid == 0u) {
            var goal = sel_f[1];
            if (mass && level == 0u) {          // level 0 sees every element above the floor: the total
                var total = 0.0;
                for (var d = 0u; d < BINS; d++) {
                    total += bins[d];
                }
                goal = want * total;
                sel_f[1] = goal;
            }
            var acc = sel_f[0];
            var chosen = BINS;
            var lowest = 0u;
            var acc_lowest = acc;
            for (var e = 0u; e < BINS; e++) {
                let d = BINS - 1u - e;
                let w = bins[d];
                if (w > 0.0) {
                    if (acc + w >= goal) {
                        chosen = d;
                        break;
                    }
                    lowest = d;
                    acc_lowest = acc;
                }
                acc += w;
            }
            if (chosen == BINS) {   // target not reached (rounding, or fewer elements than k): keep them all
                chosen = lowest;
                acc = acc_lowest;
            }
            sel_u[0] = sel_u[0] | (chosen << shift);
            sel_f[0] = acc;
        }
        workgroupBarrier();
    }
    let t = sel_u[0];
    workgroupBarrier();     // everyone has read sel_u before the next select may write it
    return t;
}

// -- the kernel ------------------------------------------------------------------------------------------------------

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32) {
    let pos = step.seq_len;     // position of the token being drawn
    let penalised = (params.penalty != 1.0 || params.frequency != 0.0 || params.presence != 0.0) && params.window > 0u;

    // the penalty hash set of the window's tokens (duplicates land on the same slot once)
    for (var s = tid; s < TAB; s += WG) {
        atomicStore(&tab[s], 0u);
    }
    if (tid < BINS) {
        atomicStore(&counts[tid], 0u);
    }
    if (tid == 0u) {
        atomicStore(&n_cand, 0u);
    }
    workgroupBarrier();
    if (penalised) {
        let n = min(min(params.window, RING), pos);
        for (var j = tid; j < n; j += WG) {
            let t = ring[(pos - 1u - j) % RING];
            if (t < V) {
                var h = slot(t);
                loop {
                    let r = atomicCompareExchangeWeak(&tab[h], 0u, (t + 1u) | (1u << 20u));
                    if (r.exchanged) {
                        break;
                    }
                    if ((r.old_value & KEY) == t + 1u) {     // already there: count it
                        atomicAdd(&tab[h], 1u << 20u);
                        break;
                    }
                    if (r.old_value != 0u) {    // taken by another token: probe on (else a spurious failure)
                        h = (h + 1u) & (TAB - 1u);
                    }
                }
            }
        }
    }
    workgroupBarrier();

    // P1: z -> work; the maximum and its lowest index
    var tail = vec4<f32>(LOW);          // the last, partial vec4 of logits when V is not a multiple of 4
    for (var e = 0u; e < 4u; e++) {
        if (4u * VF + e < V) {
            tail[e] = logits[4u * VF + e];
        }
    }
    var bv = LOW;
    var bi = NONE;
    for (var q0 = tid; q0 < V4; q0 += 2u * WG) {
        let a = select(logits4[min(q0, VL)], tail, q0 >= VF);
        let b = select(logits4[min(q0 + WG, VL)], tail, q0 + WG >= VF);
        for (var h = 0u; h < 2u; h++) {
            let q = q0 + h * WG;        // indices 4q..4q+3, in increasing order for this thread
            if (q < V4) {
                var z = select(a, b, h == 1u);
                var bits = 0xfu;    // 4q..4q+3 lie in one mask word (4q is a multiple of 4)
                if (params.masked != 0u) {
                    bits = (cons[q >> 3u] >> (4u * (q & 7u))) & 0xfu;
                }
                for (var e = 0u; e < 4u; e++) {
                    if (params.biased != 0u && 4u * q + e < V) {
                        z[e] += bitcast<f32>(cons[MW + 4u * q + e]);
                    }
                    if (penalised) {
                        z[e] = penalise(4u * q + e, z[e]);
                    }
                    if (((bits >> e) & 1u) == 0u) {
                        z[e] = LOW;
                    }
                    if (z[e] > bv) {
                        bv = z[e];
                        bi = 4u * q + e;
                    }
                }
                work[q] = z;
                if (params.logprobs != 0u) {
                    zout[q] = z;
                }
            }
        }
    }
    tree_v[tid] = bv;
    tree_i[tid] = bi;
    argmax_tree(tid);
    let zmax = tree_v[0];
    let best = tree_i[0];
    storageBarrier();

    var chosen = best;
    if (params.temperature > 0.0 && params.top_k != 1u) {
        // P2: p -> work (each thread its own vec4s of P1), the total mass, counts per power of two
        let inv_t = 1.0 / params.temperature;
        var mass = 0.0;
        var cnt = array<u32, 16>();
        for (var q0 = tid; q0 < V4; q0 += 2u * WG) {
            let a = work[q0];
            let b = work[min(q0 + WG, V4 - 1u)];
            for (var h = 0u; h < 2u; h++) {
                let q = q0 + h * WG;
                if (q < V4) {
                    let p = exp((select(a, b, h == 1u) - zmax) * inv_t);
                    work[q] = p;
                    mass += (p.x + p.y) + (p.z + p.w);
                    for (var e = 0u; e < 4u; e++) {
                        let ex = bitcast<u32>(p[e]) >> 23u;    // p in [2^(ex-127), 2^(ex-126)); p <= 1
                        if (ex + BINS > 127u) {
                            cnt[127u - ex] += 1u;
                        }
                    }
                }
            }
        }
        for (var d = 0u; d < BINS; d++) {
            if (cnt[d] > 0u) {
                atomicAdd(&counts[d], cnt[d]);
            }
        }
        tree_v[tid] = mass;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s /= 2u) {
            if (tid < s) {
                tree_v[tid] += tree_v[tid + s];
            }
            workgroupBarrier();
        }
        let total_mass = tree_v[0];
        storageBarrier();

        let k_on = params.top_k > 1u && params.top_k < V;
        let p_on = params.top_p < 1.0;
        let m_on = params.min_p > 0.0;
        // the cutoff c (bits of p) and an upper bound on how many tokens reach it; 0 = no fast path
        if (tid == 0u) {
            var c = 0u;                 // the largest lower bound found
            var n_c = NONE;             // tokens with p >= c are at most this many
            var k_found = false;
            var p_found = false;
            var m_found = false;
            var cum = 0u;
            var lower_mass = 0.0;
            let goal = params.top_p * total_mass;
            for (var d = 0u; d < BINS; d++) {
                let n_d = atomicLoad(&counts[d]);
                cum += n_d;
                lower_mass += f32(n_d) * exp2(-f32(d));
                let edge = (127u - d) << 23u;            // bits of 2^-d, the lower edge of bin d
                if (k_on && !k_found && cum >= params.top_k) {          // t_k >= edge
                    k_found = true;
                    c = max(c, edge);
                    n_c = min(n_c, cum);
                }
                if (p_on && !k_on && !p_found && lower_mass >= goal) {     // mass(p >= edge) >= goal: t_p >= edge
                    p_found = true;
                    c = max(c, edge);
                    n_c = min(n_c, cum);
                }
            }
            // min-p is a cutoff itself, unless top-p needs the top-k set's whole mass (both on: c stays <= t_k)
            if (m_on && !(k_on && p_on) && params.min_p >= exp2(-f32(BINS - 1u))) {
                let m_key = bitcast<u32>(params.min_p);
                let d_m = 127u - (m_key >> 23u);         // the bin holding min_p
                var n_m = 0u;
                for (var d = 0u; d <= d_m; d++) {
                    n_m += atomicLoad(&counts[d]);
                }
                m_found = true;
                c = max(c, m_key);
                n_c = min(n_c, n_m);
            }
            let found = select(k_found || p_found || m_found, k_found, k_on && p_on);
            uni = select(0u, c, found && n_c <= CAP);
        }
        let cut = workgroupUniformLoad(&uni);
        if (cut != 0u) {
            // P3: the candidates, in any order (padding has p = 0 < cut)
            for (var q0 = tid; q0 < V4; q0 += 2u * WG) {
                let a = work[q0];
                let b = work[min(q0 + WG, V4 - 1u)];
                for (var h = 0u; h < 2u; h++) {
                    let q = q0 + h * WG;
                    let p = select(a, b, h == 1u);
                    if (q < V4 && any(p >= vec4<f32>(bitcast<f32>(cut)))) {
                        for (var e = 0u; e < 4u; e++) {
                            let k = bitcast<u32>(p[e]);
                            if (k >= cut) {
                                let s = atomicAdd(&n_cand, 1u);
                                atomicStore(&tab[s], k);
                                atomicStore(&tab[CAP + s], 4u * q + e);
                            }
                        }
                    }
                }
            }
            workgroupBarrier();
            if (tid == 0u) {
                uni = atomicLoad(&n_cand);
            }
            let n = workgroupUniformLoad(&uni);
            sort_list(tid, n, false);
            prefix_sums(tid, n);
            if (tid == 0u) {
                var t_k = 0u;
                var m_k = total_mass;
                if (k_on && params.top_k <= n) {
                    t_k = key_at(params.top_k - 1u);
                    m_k = hist[count_at_least(n, t_k) - 1u];
                }
                var t_p = 0u;
                if (p_on) {
                    t_p = key_at(min(first_reaching(n, params.top_p * m_k, false), n - 1u));
                }
                let thr = max(max(t_k, t_p), bitcast<u32>(params.min_p));
                uni = max(count_at_least(n, thr), 1u);
            }
            let n_keep = workgroupUniformLoad(&uni);
            sort_list(tid, n_keep, true);
            prefix_sums(tid, n_keep);
            if (tid == 0u) {
                let r = uniform01(pos) * hist[n_keep - 1u];
                let j = first_reaching(n_keep, r, true);
                sel_u[1] = select(best, id_at(j), j < n_keep);
            }
            workgroupBarrier();
            chosen = sel_u[1];
            if (PROBE && tid == 0u) {
                tokens[1] = 1u;
            }
        } else {
            // fallback: thresholds by radix select over the whole vocabulary
            if (PROBE && tid == 0u) {
                tokens[1] = 2u;
            }
            var t_k = 0u;
            if (k_on) {
                t_k = radix_select(tid, 0u, false, f32(params.top_k));
            }
            var t_p = 0u;
            if (p_on) {
                t_p = radix_select(tid, t_k, true, max(params.top_p, 0.0));
            }
            let thr = max(max(t_k, t_p), bitcast<u32>(max(params.min_p, 0.0)));

            // inverse CDF over the kept tokens in index order; each thread owns the vec4s [lo, hi)
            let block = (V4 + WG - 1u) / WG;
            let lo = min(tid * block, V4);
            let hi = min(lo + block, V4);
            var s = 0.0;
            for (var q = lo; q < hi; q++) {
                let p = work[q];
                let kept = vec4<u32>(bitcast<vec4<u32>>(p) >= vec4<u32>(thr));
                s += dot(p, vec4<f32>(kept));
            }
            tree_v[tid] = s;
            workgroupBarrier();
            if (tid == 0u) {
                var c = 0.0;
                for (var t = 0u; t < WG; t++) {     // exclusive scan, in thread order
                    let v = tree_v[t];
                    tree_v[t] = c;
                    c += v;
                }
                sel_f[2] = c;
                sel_u[1] = best;    // fallback, should u * total round up to the total
            }
            workgroupBarrier();
            let total = sel_f[2];
            let r = uniform01(pos) * total;
            let c0 = tree_v[tid];
            let c1 = select(total, tree_v[min(tid + 1u, WG - 1u)], tid + 1u < WG);
            if (c0 <= r && r < c1) {
                var acc = c0;
                var pick = best;
                for (var i = 4u * lo; i < 4u * hi; i++) {
                    let p = work[i >> 2u][i & 3u];
                    if (bitcast<u32>(p) >= thr && p > 0.0) {
                        pick = i;
                        acc += p;
                        if (acc > r) {
                            break;
                        }
                    }
                }
                sel_u[1] = pick;    // exactly one thread's range holds r
            }
            workgroupBarrier();
            chosen = sel_u[1];
        }
    }

    if (tid == 0u) {
        tokens[0] = chosen;
        log[step.out_index] = chosen;
        ring[pos % RING] = chosen;
    }
}
