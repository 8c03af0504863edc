// Decode attention with the Q/K/V post-processing fused in (replaces rope_store + attention when decoding, and in
// speculative decoding's verify passes). For query head h, with g = h / (QH / KVH) its key/value head, token t of the
// pass (t < step.n_tokens) and p = step.pos0 + t its position:
//   q = rope(norm?(QKV[t, q head h] + B)),  k = rope(norm?(QKV[t, k head g] + B)),  v = QKV[t, v head g] + B
//   out[t, h] = sum_j softmax_j(SCALE * q · key_j) * value_j over lo <= j <= p, where key_j, value_j come from the
//   cache for j < p and are k, v themselves for j = p; lo = 0, or p + 1 - WINDOW for a sliding-window layer
//   (WINDOW > 0: the last WINDOW positions).
// MODE 0 (a decode step, one token): the first query head of each group also stores k and v into the cache row p
// for later steps; other workgroups of this dispatch never read row p from the cache, so there is no race.
// MODE 1 and 2 (a pass of several tokens, each computed exactly as a decode step at its position computes it): MODE 1
// only stores every token's k and v (one workgroup per key/value head and token), then MODE 2, the next dispatch,
// only attends, reading the rows of the tokens before t from the cache as a later decode step would.
// RoPE and the norm are as in rope_store.wgsl.
// Split (SPLIT > 1, flash-decoding): the keys lo..p are cut into ranges of max(RANGE, ceil(keys / SPLIT)) keys, one
// workgroup each (workgroups past the last range return at once), so that at long contexts up to QH * SPLIT
// workgroups share the keys instead of QH (a head's keys read by one SM otherwise). Workgroup (h, s) writes its
// range's unnormalised sum acc_s = sum_j e^(score_j - m_s) value_j and (m_s, l_s, ranges used), its maximum score
// and sum of e^(score_j - m_s); the next product combines the ranges as it loads its input (matvec_q8.wgsl, XSPLIT):
//   out[t, h] = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s,   M = max_s m_s.
// Short contexts use one range (the combine is then acc_0 / l_0).
//
// Constants: QH, KVH, HD (a multiple of 4, <= 1024), NEOX, QK_NORM, EPS, SCALE, KEYS, WINDOW (0: global), SPLIT,
//   RANGE, MODE;
//   KVT, the cache's element type (f32, or f16 with the shader-f16 feature: stored rounded, read as f32).
// Bindings:
//   0 QKV: array<f32>    [n_tokens, (QH + 2 KVH) * HD] the fused projection's output
//   1 B: array<f32>      [(QH + 2 KVH) * HD] bias (zeros when none)
//   2 NG: array<f32>     [2 * HD] q-norm gain then k-norm gain (read only with QK_NORM)
//   3 FREQ: array<f32>   [HD / 2]
//   4 Kc: array<vec4<KVT>>  [context, KVH * HD / 4]
//   5 Vc: array<vec4<KVT>>  [context, KVH * HD / 4]
//   6 O: array<vec4<f32>>   [n_tokens, QH * HD / 4]; with SPLIT > 1 per token [SPLIT, QH * HD / 4] sums then
//                           [SPLIT, QH] (m, l, used, 0) (not written in MODE 1)
//   7 step: uniform Step (n_tokens 1 in MODE 0)
// The score and value phases are organised as in attention.wgsl (256 threads; key groups for the values).
// Dispatch: MODE 0 (QH, SPLIT, 1); MODE 1 (KVH, 1, T); MODE 2 (QH, SPLIT, T), T the tokens the pass was recorded
// for (workgroups of tokens past step.n_tokens return at once); one workgroup of 256 threads per query head (key/value
// head in MODE 1), key range and token.
@group(0) @binding(0) var<storage, read> QKV: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read> NG: array<f32>;
@group(0) @binding(3) var<storage, read> FREQ: array<f32>;
@group(0) @binding(4) var<storage, read_write> Kc: array<vec4<KVT>>;
@group(0) @binding(5) var<storage, read_write> Vc: array<vec4<KVT>>;
@group(0) @binding(6) var<storage, read_write> O: array<vec4<f32>>;
@group(0) @binding(7) var<uniform> step: Step;

const WG: u32 = 256u;
const CHUNK: u32 = KEYS;     // keys scored per pass of the loop below (their scores wait in p)
const D4: u32 = HD / 4u;
const VG: u32 = WG / D4;

var<workgroup> q: array<f32, HD>;
var<workgroup> k: array<f32, HD>;
var<workgroup> v: array<f32, HD>;
var<workgroup> p: array<f32, CHUNK>;
var<workgroup> part: array<vec4<f32>, WG>;

fn q4(i: u32) -> vec4<f32> { return vec4<f32>(q[4u * i], q[4u * i + 1u], q[4u * i + 2u], q[4u * i + 3u]); }
fn k4(i: u32) -> vec4<f32> { return vec4<f32>(k[4u * i], k[4u * i + 1u], k[4u * i + 2u], k[4u * i + 3u]); }
fn v4(i: u32) -> vec4<f32> { return vec4<f32>(v[4u * i], v[4u * i + 1u], v[4u * i + 2u], v[4u * i + 3u]); }

// Load query head h and its key/value head g of QKV (+ bias) into q, k, v; optionally RMS-normalise q and k (gains
// NG[0 ..] and NG[HD ..]); rotate q and k by the position. Two phases, two barriers (each costs on the critical path).
fn prepare(tid: u32, t: u32, h: u32, g: u32) {
    let row = t * (QH + 2u * KVH) * HD;    // token t's row of QKV
    let qo = h * HD;
    let ko = (QH + g) * HD;
    let vo = (QH + KVH + g) * HD;
    var ssq = 0.0;
    var ssk = 0.0;
    for (var d = tid; d < HD; d += WG) {
        let xq = QKV[row + qo + d] + B[qo + d];
        let xk = QKV[row + ko + d] + B[ko + d];
        q[d] = xq;
        k[d] = xk;
        v[d] = QKV[row + vo + d] + B[vo + d];
        ssq += xq * xq;
        ssk += xk * xk;
    }
    workgroupBarrier();
    var sq = 1.0;
    var sk = 1.0;
    if (QK_NORM) {
        sq = 1.0 / sqrt(reduce(tid, ssq, false) / f32(HD) + EPS);
        sk = 1.0 / sqrt(reduce(tid, ssk, false) / f32(HD) + EPS);
    }
    let pos = f32(step.pos0 + t);
    for (var i = tid; i < HD / 2u; i += WG) {
        var i0 = 2u * i;
        var i1 = i0 + 1u;
        if (NEOX) {
            i0 = i;
            i1 = i + HD / 2u;
        }
        var gq = vec2<f32>(1.0);
        var gk = vec2<f32>(1.0);
        if (QK_NORM) {
            gq = vec2<f32>(NG[i0], NG[i1]) * sq;
            gk = vec2<f32>(NG[HD + i0], NG[HD + i1]) * sk;
        }
        let a = pos * FREQ[i];
        let c = cos(a);
        let s = sin(a);
        let q0 = q[i0] * gq.x;
        let q1 = q[i1] * gq.y;
        q[i0] = q0 * c - q1 * s;
        q[i1] = q0 * s + q1 * c;
        let k0 = k[i0] * gk.x;
        let k1 = k[i1] * gk.y;
        k[i0] = k0 * c - k1 * s;
        k[i1] = k0 * s + k1 * c;
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let t = wid.z;
    if (t >= step.n_tokens) {
        return;
    }
    var h = wid.x;
    if (MODE == 1u) {
        h = wid.x * (QH / KVH);           // the first query head of key/value head wid.x
    }
    let g = h / (QH / KVH);
    let pos = step.pos0 + t;
    let n = pos + 1u;
    var lo = select(0u, n - WINDOW, WINDOW > 0u && n > WINDOW);
    var hi = n;
    var used = 1u;
    if (SPLIT > 1u && MODE != 1u) {       // this workgroup's range of keys
        let per = max(RANGE, (n - lo + SPLIT - 1u) / SPLIT);
        used = (n - lo + per - 1u) / per;
        if (wid.y >= used) {
            return;
        }
        lo += wid.y * per;
        hi = min(n, lo + per);
    }
    prepare(tid, t, h, g);
    let kv_stride = KVH * D4;
    if (MODE != 2u && h % (QH / KVH) == 0u && wid.y == 0u) {     // one workgroup per group stores this position's k, v
        for (var d = tid; d < D4; d += WG) {
            Kc[pos * kv_stride + g * D4 + d] = vec4<KVT>(k4(d));
            Vc[pos * kv_stride + g * D4 + d] = vec4<KVT>(v4(d));
        }
    }
    if (MODE == 1u) {
        return;
    }
    let lane = tid % D4;
    let grp = tid / D4;
    var m = -3.0e38;
    var l = 0.0;
    var acc = vec4<f32>(0.0);
    for (var c0 = lo; c0 < hi; c0 += CHUNK) {
        let cn = min(CHUNK, hi - c0);
        var local_max = -3.0e38;
        for (var j = tid; j < cn; j += WG) {
            var s = 0.0;
            if (c0 + j == pos) {
                s = score_own();
            } else {
                s = score_cached((c0 + j) * kv_stride + g * D4);
            }
            s *= SCALE;
            p[j] = s;
            local_max = max(local_max, s);
        }
        let m_new = max(m, reduce(tid, local_max, true));
        var local_sum = 0.0;
        for (var j = tid; j < cn; j += WG) {
            let e = exp(p[j] - m_new);
            p[j] = e;
            local_sum += e;
        }
        let alpha = exp(m - m_new);
        l = l * alpha + reduce(tid, local_sum, false);    // the barriers inside also publish p[]
        acc *= alpha;
        if (grp < VG) {
            // keys before pos from the cache; pos itself (the chunk's last key when it holds it) from v
            let cached = min(cn, pos - c0);
            acc = weigh_values(acc, c0, cached, grp, kv_stride, g * D4 + lane);
            if (cached < cn && grp == cached % VG) {
                acc += p[cached] * vec4<f32>(vec4<KVT>(v4(lane)));
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    part[tid] = acc;
    workgroupBarrier();
    if (tid < D4) {
        var sum = vec4<f32>(0.0);
        for (var i = 0u; i < VG; i++) {
            sum += part[i * D4 + tid];
        }
        let o = select(t * QH * D4, t * SPLIT * (QH * D4 + QH), SPLIT > 1u);     // token t's results
        if (SPLIT == 1u) {
            O[o + h * D4 + tid] = sum / l;
        } else {
            O[o + wid.y * QH * D4 + h * D4 + tid] = sum;
            if (tid == 0u) {
                O[o + SPLIT * QH * D4 + wid.y * QH + h] = vec4<f32>(m, l, f32(used), 0.0);
            }
        }
    }
}

// q · the cached key at row of Kc: four loads in flight at a time, into four partial sums (the loop is otherwise
// bound by their latency); score_own: the same for this position's key k, as it is cached (the same sums in the same
// order, so that a verify pass scores each token as its decode step does).
fn score_cached(row: u32) -> f32 {
    var a = vec4<f32>(0.0);
    var d = 0u;
    for (; d + 3u < D4; d += 4u) {
        let k0 = vec4<f32>(Kc[row + d]);
        let k1 = vec4<f32>(Kc[row + d + 1u]);
        let k2 = vec4<f32>(Kc[row + d + 2u]);
        let k3 = vec4<f32>(Kc[row + d + 3u]);
        a += vec4<f32>(dot(q4(d), k0), dot(q4(d + 1u), k1), dot(q4(d + 2u), k2), dot(q4(d + 3u), k3));
    }
    for (; d < D4; d++) {
        a.x += dot(q4(d), vec4<f32>(Kc[row + d]));
    }
    return (a.x + a.y) + (a.z + a.w);
}

fn score_own() -> f32 {
    var a = vec4<f32>(0.0);
    var d = 0u;
    for (; d + 3u < D4; d += 4u) {
        a += vec4<f32>(dot(q4(d), vec4<f32>(vec4<KVT>(k4(d)))), dot(q4(d + 1u), vec4<f32>(vec4<KVT>(k4(d + 1u)))),
                       dot(q4(d + 2u), vec4<f32>(vec4<KVT>(k4(d + 2u)))),
                       dot(q4(d + 3u), vec4<f32>(vec4<KVT>(k4(d + 3u)))));
    }
    for (; d < D4; d++) {
        a.x += dot(q4(d), vec4<f32>(vec4<KVT>(k4(d))));
    }
    return (a.x + a.y) + (a.z + a.w);
}

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
        let v0 = vec4<f32>(Vc[(c0 + j) * stride + col]);
        let v1 = vec4<f32>(Vc[(c0 + j + VG) * stride + col]);
        let v2 = vec4<f32>(Vc[(c0 + j + 2u * VG) * stride + col]);
        let v3 = vec4<f32>(Vc[(c0 + j + 3u * VG) * stride + col]);
        a0 += p[j] * v0;
        a1 += p[j + VG] * v1;
        a2 += p[j + 2u * VG] * v2;
        a3 += p[j + 3u * VG] * v3;
    }
    for (; j < cn; j += VG) {
        a0 += p[j] * vec4<f32>(Vc[(c0 + j) * stride + col]);
    }
    return (a0 + a1) + (a2 + a3);
}
