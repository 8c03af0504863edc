// Decode attention with the Q/K/V post-processing fused in (replaces rope_store + attention when decoding, and in
// speculative decoding's verify passes). For query head h, with g = h / (QH / KVH) its key/value head, token t of the
// pass (t < step.n_tokens) and p = step.pos0 + t its position:
//   q = rope(norm?(QKV[t, q head h] + B)),  k = rope(norm?(QKV[t, k head g] + B)),  v = QKV[t, v head g] + B
//   out[t, h] = sum_j softmax_j(SCALE * q · key_j) * value_j over lo <= j <= p, where key_j, value_j come from the
//   cache for j < p and are k, v themselves for j = p; lo = 0, or p + 1 - WINDOW for a sliding-window layer
//   (WINDOW > 0: the last WINDOW positions).
// Grouped queries: a workgroup computes a block of GB (<= 4) query heads of one key/value head together, so that each
// key and value it reads serves GB heads (the G = QH / KVH heads of a group are cut into BLOCKS = ceil(G / GB) blocks;
// the last may have fewer than GB, its missing heads computed as copies of the group's last head and not written).
// A key's scores for the block's heads are the components of a vec4, so the softmax's reductions serve all of them.
// MODE 0 (a decode step, one token): the first block of each group also stores k and v into the cache row p for later
// steps; other workgroups of this dispatch never read row p from the cache, so there is no race.
// MODE 1 and 2 (a pass of several tokens, each computed exactly as a decode step at its position computes it): MODE 1
// only stores every token's k and v (one workgroup per key/value head and token), then MODE 2, the next dispatch,
// only attends, reading the rows of the tokens before t from the cache as a later decode step would.
// RoPE and the norm are as in rope_store.wgsl.
// Split (SPLIT > 1, flash-decoding): the keys lo..p are cut into ranges of max(RANGE, ceil(keys / SPLIT)) keys, one
// workgroup each (workgroups past the last range return at once), so that at long contexts the keys are shared by
// SPLIT times as many workgroups. Workgroup (block, s) writes for each of its heads the range's unnormalised sum
// acc_s = sum_j e^(score_j - m_s) value_j and (m_s, l_s, ranges used), its maximum score and sum of e^(score_j - m_s);
// the next product combines the ranges as it loads its input (matvec_q8.wgsl, XSPLIT):
//   out[t, h] = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s,   M = max_s m_s.
// Short contexts use one range (the combine is then acc_0 / l_0).
//
// Constants: QH, KVH, HD (a multiple of 4, <= 256 with GB > 1), NEOX, QK_NORM, EPS, SCALE, KEYS, WINDOW (0: global),
//   SPLIT, RANGE, MODE, GB (query heads a workgroup: kernels.decode_heads), KVT, the cache's element type (f32, or f16
//   with the shader-f16 feature: stored rounded, read as f32). A template (kernels.build renders the //% lines with
//   jinja2): a head's accumulators are separate variables.
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
// Each thread scores keys (one key a thread at a time, KEYS a pass of the loop); for the values, thread (grp, lane)
// sums lane's vec4 of the values of keys grp, grp + VG, ...
// Dispatch (kernels.attention_decode_groups): MODE 0 (KVH * BLOCKS, SPLIT, 1); MODE 1 (KVH, 1, T); MODE 2
// (KVH * BLOCKS, SPLIT, T), T the tokens the pass was recorded for (workgroups of tokens past step.n_tokens return at
// once); one workgroup of 256 threads per block of query heads (key/value head in MODE 1), key range and token.
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
const G: u32 = QH / KVH;     // query heads a key/value head
const BLOCKS: u32 = (G + GB - 1u) / GB;

var<workgroup> q: array<f32, GB * HD>;       // the block's query heads, head i at i * HD
var<workgroup> k: array<f32, HD>;
var<workgroup> v: array<f32, HD>;
var<workgroup> p: array<vec4<f32>, CHUNK>;   // a key's scores, then weights, of the block's heads (head i: component i)
var<workgroup> part: array<vec4<f32>, WG>;   // the reductions' scratch

fn q4(i: u32, e: u32) -> vec4<f32> {
    let b = i * HD + 4u * e;
    return vec4<f32>(q[b], q[b + 1u], q[b + 2u], q[b + 3u]);
}
fn k4(i: u32) -> vec4<f32> { return vec4<f32>(k[4u * i], k[4u * i + 1u], k[4u * i + 2u], k[4u * i + 3u]); }
fn v4(i: u32) -> vec4<f32> { return vec4<f32>(v[4u * i], v[4u * i + 1u], v[4u * i + 2u], v[4u * i + 3u]); }

// Load the block's query heads h0 .. (each clamped to the group's last head, hl) and key/value head g of token t's
// QKV row (+ bias) into q, k, v; optionally RMS-normalise them (gains NG[0 ..] and NG[HD ..]); rotate q and k by the
// position. Two phases, two barriers (each costs on the critical path), and with the norm its two reductions.
fn prepare(tid: u32, t: u32, h0: u32, hl: u32, g: u32) {
    let row = t * (QH + 2u * KVH) * HD;    // token t's row of QKV
    let ko = (QH + g) * HD;
    let vo = (QH + KVH + g) * HD;
    var ssq = vec4<f32>(0.0);
    var ssk = 0.0;
    for (var d = tid; d < HD; d += WG) {
        let xk = QKV[row + ko + d] + B[ko + d];
        k[d] = xk;
        v[d] = QKV[row + vo + d] + B[vo + d];
        ssk += xk * xk;
//% for i in range(GB)
        let qo{{ i }} = min(h0 + {{ i }}u, hl) * HD + d;
        let xq{{ i }} = QKV[row + qo{{ i }}] + B[qo{{ i }}];
        q[{{ i }}u * HD + d] = xq{{ i }};
        ssq.{{ C[i] }} += xq{{ i }} * xq{{ i }};
//% endfor
    }
    workgroupBarrier();
    var sq = vec4<f32>(1.0);
    var sk = 1.0;
    if (QK_NORM) {
        sq = 1.0 / sqrt(reduce(tid, ssq, false) / f32(HD) + EPS);
        sk = 1.0 / sqrt(reduce(tid, vec4<f32>(ssk, 0.0, 0.0, 0.0), false).x / f32(HD) + EPS);
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
            gq = vec2<f32>(NG[i0], NG[i1]);
            gk = vec2<f32>(NG[HD + i0], NG[HD + i1]) * sk;
        }
        let a = pos * FREQ[i];
        let c = cos(a);
        let s = sin(a);
        let k0 = k[i0] * gk.x;
        let k1 = k[i1] * gk.y;
        k[i0] = k0 * c - k1 * s;
        k[i1] = k0 * s + k1 * c;
//% for i in range(GB)
        let q0{{ i }} = q[{{ i }}u * HD + i0] * (gq.x * sq.{{ C[i] }});
        let q1{{ i }} = q[{{ i }}u * HD + i1] * (gq.y * sq.{{ C[i] }});
        q[{{ i }}u * HD + i0] = q0{{ i }} * c - q1{{ i }} * s;
        q[{{ i }}u * HD + i1] = q0{{ i }} * s + q1{{ i }} * c;
//% endfor
    }
    workgroupBarrier();
}

// The values' weighted sums of the block's heads (head i: acc<i>): this thread's vec4 of them.
//% for i in range(GB)
var<private> acc{{ i }}: vec4<f32>;
//% endfor

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let t = wid.z;
    if (t >= step.n_tokens) {
        return;
    }
    var g = wid.x / BLOCKS;
    var h0 = g * G + (wid.x % BLOCKS) * GB;     // the block's first query head
    if (MODE == 1u) {
        g = wid.x;
        h0 = g * G;
    }
    let hl = g * G + G - 1u;                    // the group's last
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
    prepare(tid, t, h0, hl, g);
    let kv_stride = KVH * D4;
    if (MODE != 2u && h0 == g * G && wid.y == 0u) {     // one workgroup per group stores this position's k, v
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
    var m = vec4<f32>(-3.0e38);
    var l = vec4<f32>(0.0);
    for (var c0 = lo; c0 < hi; c0 += CHUNK) {
        let cn = min(CHUNK, hi - c0);
        var local_max = vec4<f32>(-3.0e38);
        for (var j = tid; j < cn; j += WG) {
            var s = vec4<f32>(0.0);
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
        var local_sum = vec4<f32>(0.0);
        for (var j = tid; j < cn; j += WG) {
            let e = exp(p[j] - m_new);
            p[j] = e;
            local_sum += e;
        }
        let alpha = exp(m - m_new);
        l = l * alpha + reduce(tid, local_sum, false);    // the barriers inside also publish p[]
//% for i in range(GB)
        acc{{ i }} *= alpha.{{ C[i] }};
//% endfor
        if (grp < VG) {
            // keys before pos from the cache; pos itself (the chunk's last key when it holds it) from v
            let cached = min(cn, pos - c0);
            weigh_values(c0, cached, grp, kv_stride, g * D4 + lane);
            if (cached < cn && grp == cached % VG) {
                let own = vec4<f32>(vec4<KVT>(v4(lane)));
                let w = p[cached];
//% for i in range(GB)
                acc{{ i }} += w.{{ C[i] }} * own;
//% endfor
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    // each head's sum over the key groups, written by the threads of one group (a head past the group's last: none)
    let o = select(t * QH * D4, t * SPLIT * (QH * D4 + QH), SPLIT > 1u);     // token t's results
//% for i in range(GB)
    if (h0 + {{ i }}u <= hl) {
        part[tid] = acc{{ i }};
        workgroupBarrier();
        if (tid < D4) {
            var sum = vec4<f32>(0.0);
            for (var r = 0u; r < VG; r++) {
                sum += part[r * D4 + tid];
            }
            let h = h0 + {{ i }}u;
            if (SPLIT == 1u) {
                O[o + h * D4 + tid] = sum / l.{{ C[i] }};
            } else {
                O[o + wid.y * QH * D4 + h * D4 + tid] = sum;
                if (tid == 0u) {
                    O[o + SPLIT * QH * D4 + wid.y * QH + h] = vec4<f32>(m.{{ C[i] }}, l.{{ C[i] }}, f32(used), 0.0);
                }
            }
        }
        workgroupBarrier();
    }
//% endfor
}

// The block's heads' q · the cached key at row of Kc (score_cached), or · this position's key k as it is cached
// (score_own: the same sums in the same order, so that a verify pass scores each token as its decode step does).
// Four of the key's vec4s are loaded at a time, into four partial sums a head (the loop is otherwise bound by their
// latency).
//% set cached = ("score_cached", "row: u32", "vec4<f32>(Kc[row + E])")
//% set own = ("score_own", "", "vec4<f32>(vec4<KVT>(k4(E)))")
//% for name, args, key in [cached, own]
fn {{ name }}({{ args }}) -> vec4<f32> {
//% for i in range(GB)
    var a{{ i }} = vec4<f32>(0.0);
//% endfor
    var d = 0u;
    for (; d + 3u < D4; d += 4u) {
        let k0 = {{ key.replace("E", "d") }};
        let k1 = {{ key.replace("E", "d + 1u") }};
        let k2 = {{ key.replace("E", "d + 2u") }};
        let k3 = {{ key.replace("E", "d + 3u") }};
//% for i in range(GB)
        a{{ i }} += vec4<f32>(dot(q4({{ i }}u, d), k0), dot(q4({{ i }}u, d + 1u), k1), dot(q4({{ i }}u, d + 2u), k2),
                       dot(q4({{ i }}u, d + 3u), k3));
//% endfor
    }
    for (; d < D4; d++) {
        let k0 = {{ key.replace("E", "d") }};
//% for i in range(GB)
        a{{ i }}.x += dot(q4({{ i }}u, d), k0);
//% endfor
    }
    var s = vec4<f32>(0.0);
//% for i in range(GB)
    s.{{ C[i] }} = (a{{ i }}.x + a{{ i }}.y) + (a{{ i }}.z + a{{ i }}.w);
//% endfor
    return s;
}
//% endfor

// Workgroup-wide reduction of a vec4 (a value of each head of the block), in part. Every thread must call it (it has
// barriers); all get the result: the sum, or the maximum when is_max, of the threads' x. (A two-level version with 2
// barriers instead of 8 measured no faster on the H200.)
fn reduce(tid: u32, x: vec4<f32>, is_max: bool) -> vec4<f32> {
    part[tid] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (tid < s) {
            part[tid] = select(part[tid] + part[tid + s], max(part[tid], part[tid + s]), is_max);
        }
        workgroupBarrier();
    }
    let r = part[0];
    workgroupBarrier();
    return r;
}

// acc<i> += sum of p[j].<i> * Vc[(c0 + j) * stride + col] over the keys j < cn of key group grp (j = grp, grp + VG,
// ...): one thread's vec4 of each head's weighted value sum for a chunk of keys starting at c0. Four keys are loaded
// at a time, so that four loads are in flight instead of one (the loop is otherwise bound by their latency).
fn weigh_values(c0: u32, cn: u32, grp: u32, stride: u32, col: u32) {
    var j = grp;
    for (; j + 3u * VG < cn; j += 4u * VG) {
        let v0 = vec4<f32>(Vc[(c0 + j) * stride + col]);
        let v1 = vec4<f32>(Vc[(c0 + j + VG) * stride + col]);
        let v2 = vec4<f32>(Vc[(c0 + j + 2u * VG) * stride + col]);
        let v3 = vec4<f32>(Vc[(c0 + j + 3u * VG) * stride + col]);
        let p0 = p[j];
        let p1 = p[j + VG];
        let p2 = p[j + 2u * VG];
        let p3 = p[j + 3u * VG];
//% for i in range(GB)
        acc{{ i }} += (p0.{{ C[i] }} * v0 + p1.{{ C[i] }} * v1) + (p2.{{ C[i] }} * v2 + p3.{{ C[i] }} * v3);
//% endfor
    }
    for (; j < cn; j += VG) {
        let v0 = vec4<f32>(Vc[(c0 + j) * stride + col]);
        let p0 = p[j];
//% for i in range(GB)
        acc{{ i }} += p0.{{ C[i] }} * v0;
//% endfor
    }
}
