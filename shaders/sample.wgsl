// Sampling on the GPU: one token id from the logits row, with repetition penalty, temperature, top-k, top-p and
// min-p, drawn with a random number derived from (seed, position). Writes the id to tokens[0] (the next pass's input),
// to log[step.out_index] (read back after several steps) and to the recent-token ring (for later penalties).
//
// What it computes (the same semantics as cera_web.sampling.sample_numpy, the host-side specification):
//   1. z_i = logits_i, except for the distinct tokens among the last `window` tokens of the sequence (the ring,
//      prompt included): z = logit / penalty when logit > 0, else logit * penalty (llama.cpp's repeat penalty).
//   2. temperature <= 0 or top_k == 1: the id is argmax_i z_i (the lowest index among equal maxima); done.
//   3. p_i = exp((z_i - max z) / temperature): unnormalised probabilities, the most likely token has p = 1.
//   4. thresholds on p (a token is kept when p_i >= all three; ties at a threshold are all kept):
//        top-k  t_k = the k-th largest p (0 = off);
//        top-p  t_p = the largest t such that the mass of {p_i >= max(t, t_k)} is >= top_p * mass{p_i >= t_k}
//               (the smallest set of most likely tokens holding top_p of the top-k set's probability);
//        min-p  t_m = min_p * (the largest p, which is 1).
//   5. with u in [0, 1) from hash(seed, position), the id is the first kept index (in index order) at which the
//      running sum of kept p exceeds u * (their total): inverse-CDF sampling, no sort needed.
//
// Algorithm (one workgroup; every step is exact and sums in a fixed order, so a run reproduces bit for bit):
//   - p >= 0, so the bits of an f32 p, read as u32, order exactly like p. Thresholds t_k and t_p are found by
//     radix select over those 32-bit keys: 8 levels of 4 bits; each level histograms (counts for top-k, mass for
//     top-p) the 16 digit values among the elements that share the key bits decided so far, then takes the highest
//     digit whose cumulative weight (from the top) reaches the target. After 8 levels the key is exact.
//   - the draw: each thread owns a contiguous block of indices, sums its kept mass, an in-order scan gives each
//     block's starting offset, and the one thread whose block holds u * total walks it to find the id.
//
// Constants: V (vocabulary size), RING (recent-token ring length).
// Bindings:
//   0 logits: array<f32>              [V]  the last position's logits
//   1 tokens: array<u32>              [>= 1]  tokens[0] receives the id
//   2 log: array<u32>                 [max steps per readback]  log[step.out_index] receives the id
//   3 step: uniform Step              the id is for position step.seq_len
//   4 params: uniform Sample          see below (written by the host once per generation)
//   5 ring: array<u32>                [RING]  ring[p % RING] = the token at position p (host writes the prompt's,
//                                              this kernel writes each sampled one)
//   6 work: array<f32>                [V]  scratch: the penalised logits, then p
// Dispatch: (1, 1, 1), one workgroup of 256 threads.

struct Sample {
    temperature: f32,   // <= 0: greedy
    top_k: u32,         // 0 or >= V: off
    top_p: f32,         // >= 1: off
    min_p: f32,         // 0: off
    penalty: f32,       // 1: off
    window: u32,        // how many of the latest tokens the penalty covers (<= RING)
    seed_lo: u32,
    seed_hi: u32,
}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> tokens: array<u32>;
@group(0) @binding(2) var<storage, read_write> log: array<u32>;
@group(0) @binding(3) var<uniform> step: Step;
@group(0) @binding(4) var<uniform> params: Sample;
@group(0) @binding(5) var<storage, read_write> ring: array<u32>;
@group(0) @binding(6) var<storage, read_write> work: array<f32>;

const WG: u32 = 256u;
const BINS: u32 = 16u;

var<workgroup> red_v: array<f32, 256>;
var<workgroup> red_i: array<u32, 256>;
var<workgroup> hist: array<f32, 1024>;     // [BINS][64]: per-thread histograms folded 4 threads to a slot
var<workgroup> bins: array<f32, 16>;
var<workgroup> sel_u: array<u32, 2>;      // radix select: decided key bits; the drawn id
var<workgroup> sel_f: array<f32, 3>;      // radix select: weight above the current bucket, target; total mass

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
        var h = array<f32, 16>();   // explicit: every level starts from zero
        for (var i = tid; i < V; i += WG) {
            let p = work[i];
            let k = bitcast<u32>(p);
            if (k >= floor && (k & hi_mask) == prefix) {
                let d = (k >> shift) & 15u;
                h[d] += select(1.0, p, mass);
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
        red_v[tid] = hist[d4 * 64u + j4] + hist[d4 * 64u + j4 + 1u] + hist[d4 * 64u + j4 + 2u]
                   + hist[d4 * 64u + j4 + 3u];
        workgroupBarrier();
        if (tid < BINS) {
            var s = 0.0;
            for (var j = 0u; j < 16u; j++) {
                s += red_v[tid * 16u + j];
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

fn penalised(l: f32) -> f32 {
    return select(l * params.penalty, l / params.penalty, l > 0.0);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32) {
    let pos = step.seq_len;     // position of the token being drawn

    // 1. the penalised logits. A token that occurs several times in the window is written by several threads,
    // all with the same value (computed from the untouched logits), so the penalty applies once.
    for (var i = tid; i < V; i += WG) {
        work[i] = logits[i];
    }
    storageBarrier();
    if (params.penalty != 1.0) {
        let n = min(min(params.window, RING), pos);
        for (var j = tid; j < n; j += WG) {
            let t = ring[(pos - 1u - j) % RING];
            if (t < V) {
                work[t] = penalised(logits[t]);
            }
        }
    }
    storageBarrier();

    // 2. the maximum and its lowest index
    var bv = -3.4e38;
    var bi = 0xffffffffu;
    for (var i = tid; i < V; i += WG) {
        let v = work[i];
        if (v > bv) {
            bv = v;
            bi = i;
        }
    }
    red_v[tid] = bv;
    red_i[tid] = bi;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (tid < s) {
            let ov = red_v[tid + s];
            let oi = red_i[tid + s];
            if (ov > red_v[tid] || (ov == red_v[tid] && oi < red_i[tid])) {
                red_v[tid] = ov;
                red_i[tid] = oi;
            }
        }
        workgroupBarrier();
    }
    let zmax = red_v[0];
    let best = red_i[0];
    workgroupBarrier();

    var chosen = best;
    if (params.temperature > 0.0 && params.top_k != 1u) {
        // 3. unnormalised probabilities, in place
        let inv_t = 1.0 / params.temperature;
        for (var i = tid; i < V; i += WG) {
            work[i] = exp((work[i] - zmax) * inv_t);
        }
        storageBarrier();

        // 4. the threshold
        var t_k = 0u;
        if (params.top_k > 1u && params.top_k < V) {
            t_k = radix_select(tid, 0u, false, f32(params.top_k));
        }
        var t_p = 0u;
        if (params.top_p < 1.0) {
            t_p = radix_select(tid, t_k, true, max(params.top_p, 0.0));
        }
        let thr = max(max(t_k, t_p), bitcast<u32>(max(params.min_p, 0.0)));

        // 5. inverse CDF over the kept tokens in index order; each thread owns indices [lo, hi)
        let block = (V + WG - 1u) / WG;
        let lo = min(tid * block, V);
        let hi = min(lo + block, V);
        var s = 0.0;
        for (var i = lo; i < hi; i++) {
            let p = work[i];
            if (bitcast<u32>(p) >= thr) {
                s += p;
            }
        }
        red_v[tid] = s;
        workgroupBarrier();
        if (tid == 0u) {
            var c = 0.0;
            for (var t = 0u; t < WG; t++) {     // exclusive scan, in thread order
                let v = red_v[t];
                red_v[t] = c;
                c += v;
            }
            sel_f[2] = c;
            sel_u[1] = best;    // fallback, should u * total round up to the total
        }
        workgroupBarrier();
        let total = sel_f[2];
        let r = uniform01(pos) * total;
        let c0 = red_v[tid];
        let c1 = select(total, red_v[min(tid + 1u, WG - 1u)], tid + 1u < WG);
        if (c0 <= r && r < c1) {
            var acc = c0;
            var pick = best;
            for (var i = lo; i < hi; i++) {
                let p = work[i];
                if (bitcast<u32>(p) >= thr) {
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

    if (tid == 0u) {
        tokens[0] = chosen;
        log[step.out_index] = chosen;
        ring[pos % RING] = chosen;
    }
}
