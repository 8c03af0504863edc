// Causal grouped-query attention for a prompt chunk, 64 query rows a workgroup, for heads of 64 on GPUs with subgroups
// (attention.wgsl's result: for each token t of the pass and query head h, n = step.pos0 + t + 1, g = h / G,
// G = HEADS / KV_HEADS,
//   out[t, h, :] = sum_j softmax_j(SCALE * Q[t, h, :] · Kc[j, g, :]) * Vc[j, g, :]   for lo <= j < n,
//   lo = 0, or n - WINDOW in a sliding-window layer).
// A workgroup takes 64 query rows of one KV head (row i: token i / G, head g * G + i % G, token-major as in
// attention_tiled.wgsl) and walks the keys in tiles of 32 with each row's online softmax. Its 128 threads are 16 row
// groups of 8: thread (r, c) = (tid / 8, tid % 8) owns rows r, r + 16, r + 32, r + 48 and
//   scores them against keys c, c + 8, c + 16, c + 24 of the tile: 16 dot products from 8 vec4 reads of workgroup
//     memory a vec4 of the head (attention_tiled.wgsl: 8 from 6);
//   then adds the tile's weighted values to output vec4s c and c + 8 of those rows: 32 FMAs from 3 reads a key.
// A row's maximum over the tile is reduced across its 8 threads with subgroup shuffles (no workgroup memory, no
// barrier), its sum of weights is kept per thread and reduced once at the end. So a 64 x 32 tile costs 4 barriers
// (attention_tiled.wgsl: 4 for 32 x 32).
// Workgroup memory: exactly 32 KiB (the queries 16, a tile's keys 8, its values 8); the tile's weights
// exp(s - m), 32 keys x 64 rows, go where its keys were once all rows are scored. No padding: each row's (key's)
// vec4 d sits at d ^ (row % 8) so the 4 rows (8 keys) a warp reads at once fall in different banks.
// Split (SPLIT > 1, for passes with too few workgroups to fill the GPU): as attention_tiled.wgsl, workgroup z takes
// key tiles z, z + SPLIT, ... and writes unnormalised sums and each row's (m, l) for attention_combine.wgsl.
//
// Constants: HEADS, KV_HEADS, HD (64), SCALE (f32), WINDOW (0: global attention), KVT (the cache's element type:
//   f32, or f16 with the shader-f16 feature; read as f32), SPLIT, TMAX (the pass's most tokens: the parts' rows).
// Needs subgroups of at least 8 invocations, each 8 consecutive invocations of the workgroup in one subgroup
// (kernels.attention_prefill_kernel checks the adapter's subgroup size).
// Bindings:
//   0 Q:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]
//   1 Kc:  array<vec4<KVT>>     [context, KV_HEADS * HD / 4]   (rows < step.pos0 + step.n_tokens are filled)
//   2 Vc:  array<vec4<KVT>>     [context, KV_HEADS * HD / 4]
//   3 O:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]; with SPLIT > 1 the parts: [SPLIT, TMAX, HEADS * HD / 4]
//                               sums, then [SPLIT, TMAX, HEADS] (m, l, 0, 0)
//   4 step: uniform Step
// Dispatch: (KV_HEADS, ceil(n_tokens_max * G / 64), SPLIT) workgroups of 128 threads (kernels.attention_tiled_groups
// with rows 64); workgroups take the rows from the end (the most keys first); rows past step.n_tokens write nothing.
// The bindings and load_k / load_v (the key and value tiles): attention_tiled_io.wgsl.
//#include "attention_tiled_io.wgsl"

const D4: u32 = HD / 4u;          // vec4s a head (16)
const G: u32 = HEADS / KV_HEADS;  // query heads a KV head
const BR: u32 = 64u;              // query rows a workgroup
const BC: u32 = 32u;              // keys a tile
const WG: u32 = 128u;
const NONE: f32 = -3.0e38;        // the maximum of no score

var<workgroup> qs: array<vec4<f32>, BR * D4>;  // the rows' queries (times SCALE): row i's vec4 d at i D4 + (d ^ i % 8)
var<workgroup> ks: array<vec4<f32>, BC * D4>;  // the tile's keys (key j's vec4 d at j D4 + (d ^ j % 8)), then its
                                               // weights: key j's for rows r + 16i at j D4 + (r ^ j % 8)
var<workgroup> vs: array<vec4<f32>, BC * D4>;  // the tile's values, key j's vec4 d at j D4 + d

fn put_kv(e: u32, k: vec4<f32>, v: vec4<f32>) {
    let j = e / D4;
    ks[j * D4 + ((e % D4) ^ (j % 8u))] = k;
    vs[e] = v;
}

// Row state of the 4 rows a thread owns (components: rows r, r + 16, r + 32, r + 48).
struct Rows {
    lo: vec4<u32>,     // first key of each row
    n: vec4<u32>,      // its end
}

// The scores of one row (components: keys c + 8i of the tile at k0), its keys out of range at NONE.
fn masked(s: vec4<f32>, k0: u32, c: u32, lo: u32, n: u32) -> vec4<f32> {
    let key = vec4<u32>(k0 + c) + vec4<u32>(0u, 8u, 16u, 24u);
    return select(vec4<f32>(NONE), s, (key >= vec4<u32>(lo)) & (key < vec4<u32>(n)));
}

fn hmax(v: vec4<f32>) -> f32 {
    return max(max(v.x, v.y), max(v.z, v.w));
}

// exp(s - m) of a row's masked scores: 0 where out of range (s = NONE; m is NONE only where all are).
fn weights(s: vec4<f32>, m: f32) -> vec4<f32> {
    return select(vec4<f32>(0.0), exp(s - vec4<f32>(m)), s > vec4<f32>(NONE));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let g = wid.x;
    let z = wid.z;                          // this workgroup's share of the key tiles (SPLIT > 1)
    let row0 = (nwg.y - 1u - wid.y) * BR;   // the last rows (the most keys) first
    if (row0 / G >= step.n_tokens) {
        return;
    }
    let last = step.n_tokens - 1u;
    // the rows' queries, scaled: vec4 e of row e / D4
    for (var i = 0u; i < BR * D4 / WG; i++) {
        let e = tid + i * WG;
        let row = e / D4;
        let rt = min((row0 + row) / G, last);
        qs[row * D4 + ((e % D4) ^ (row % 8u))] = SCALE * Q[(rt * HEADS + g * G + (row0 + row) % G) * D4 + e % D4];
    }
    let r = tid / 8u;
    let c = tid % 8u;
    let rows = vec4<u32>(r, r + 16u, r + 32u, r + 48u);
    let tok = (vec4<u32>(row0) + rows) / G;
    let n = vec4<u32>(step.pos0) + min(tok, vec4<u32>(last)) + 1u;          // keys of each row: lo <= key < n
    let lo = select(vec4<u32>(0u), n - vec4<u32>(WINDOW), (vec4<u32>(WINDOW) > vec4<u32>(0u)) & (n > vec4<u32>(WINDOW)));
    let n_max = step.pos0 + min((row0 + BR - 1u) / G, last) + 1u;     // the workgroup's keys
    let n_min = step.pos0 + min(row0 / G, last) + 1u;
    let k_start = select(0u, (n_min - WINDOW) / BC * BC, WINDOW > 0u && n_min > WINDOW);
    let xr = r % 8u;                        // the swizzle of this thread's rows (r + 16i has the same)

    let k_first = k_start + z * BC;
    var k0n = load_k(k_first, tid, g, n_max); var k1n = load_k(k_first, tid + WG, g, n_max);
    var k2n = load_k(k_first, tid + 2u * WG, g, n_max); var k3n = load_k(k_first, tid + 3u * WG, g, n_max);
    var v0n = load_v(k_first, tid, g, n_max); var v1n = load_v(k_first, tid + WG, g, n_max);
    var v2n = load_v(k_first, tid + 2u * WG, g, n_max); var v3n = load_v(k_first, tid + 3u * WG, g, n_max);
    var m = vec4<f32>(NONE);                // running maxima of the 4 rows
    var l = vec4<f32>(0.0);                 // this thread's share of their running sums
    var o0 = vec4<f32>(0.0); var p0 = vec4<f32>(0.0);   // row r: output vec4s c, c + 8
    var o1 = vec4<f32>(0.0); var p1 = vec4<f32>(0.0);   // row r + 16
    var o2 = vec4<f32>(0.0); var p2 = vec4<f32>(0.0);   // row r + 32
    var o3 = vec4<f32>(0.0); var p3 = vec4<f32>(0.0);   // row r + 48
    for (var k0 = k_first; k0 < n_max; k0 += SPLIT * BC) {
        workgroupBarrier();                 // the previous tile's weights and values are read
        put_kv(tid, k0n, v0n); put_kv(tid + WG, k1n, v1n);
        put_kv(tid + 2u * WG, k2n, v2n); put_kv(tid + 3u * WG, k3n, v3n);
        workgroupBarrier();
        let kn = k0 + SPLIT * BC;
        if (kn < n_max) {
            k0n = load_k(kn, tid, g, n_max); k1n = load_k(kn, tid + WG, g, n_max);
            k2n = load_k(kn, tid + 2u * WG, g, n_max); k3n = load_k(kn, tid + 3u * WG, g, n_max);
            v0n = load_v(kn, tid, g, n_max); v1n = load_v(kn, tid + WG, g, n_max);
            v2n = load_v(kn, tid + 2u * WG, g, n_max); v3n = load_v(kn, tid + 3u * WG, g, n_max);
        }
        // scores: row r + 16i (s_i) against keys c + 8j (component j)
        var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
        for (var d = 0u; d < D4; d++) {
            let qd = r * D4 + (d ^ xr);
            let q0 = qs[qd];
            let q1 = qs[qd + 16u * D4];
            let q2 = qs[qd + 32u * D4];
            let q3 = qs[qd + 48u * D4];
            let kd = c * D4 + (d ^ c);
            let x0 = ks[kd];
            let x1 = ks[kd + 8u * D4];
            let x2 = ks[kd + 16u * D4];
            let x3 = ks[kd + 24u * D4];
            s0 += vec4<f32>(dot(q0, x0), dot(q0, x1), dot(q0, x2), dot(q0, x3));
            s1 += vec4<f32>(dot(q1, x0), dot(q1, x1), dot(q1, x2), dot(q1, x3));
            s2 += vec4<f32>(dot(q2, x0), dot(q2, x1), dot(q2, x2), dot(q2, x3));
            s3 += vec4<f32>(dot(q3, x0), dot(q3, x1), dot(q3, x2), dot(q3, x3));
        }
        s0 = masked(s0, k0, c, lo.x, n.x);
        s1 = masked(s1, k0, c, lo.y, n.y);
        s2 = masked(s2, k0, c, lo.z, n.z);
        s3 = masked(s3, k0, c, lo.w, n.w);
        // each row's maximum over the tile: this thread's 4 keys, then the row group's 8 threads
        var mt = vec4<f32>(hmax(s0), hmax(s1), hmax(s2), hmax(s3));
        mt = max(mt, subgroupShuffleXor(mt, 1u));
        mt = max(mt, subgroupShuffleXor(mt, 2u));
        mt = max(mt, subgroupShuffleXor(mt, 4u));
        let mn = max(m, mt);
        let w0 = weights(s0, mn.x);
        let w1 = weights(s1, mn.y);
        let w2 = weights(s2, mn.z);
        let w3 = weights(s3, mn.w);
        let f = exp(m - mn);                // rescales what the rows hold (1 while a row has seen no key)
        m = mn;
        l = l * f + vec4<f32>(dot(w0, vec4<f32>(1.0)), dot(w1, vec4<f32>(1.0)), dot(w2, vec4<f32>(1.0)),
                              dot(w3, vec4<f32>(1.0)));
        workgroupBarrier();                 // every row is scored: the keys' memory takes the weights
        ks[c * D4 + (r ^ c)] = vec4<f32>(w0.x, w1.x, w2.x, w3.x);
        ks[(c + 8u) * D4 + (r ^ c)] = vec4<f32>(w0.y, w1.y, w2.y, w3.y);
        ks[(c + 16u) * D4 + (r ^ c)] = vec4<f32>(w0.z, w1.z, w2.z, w3.z);
        ks[(c + 24u) * D4 + (r ^ c)] = vec4<f32>(w0.w, w1.w, w2.w, w3.w);
        workgroupBarrier();
        o0 *= f.x; p0 *= f.x;
        o1 *= f.y; p1 *= f.y;
        o2 *= f.z; p2 *= f.z;
        o3 *= f.w; p3 *= f.w;
        for (var j = 0u; j < BC; j++) {
            let w = ks[j * D4 + (r ^ (j % 8u))];
            let v0 = vs[j * D4 + c];
            let v1 = vs[j * D4 + c + 8u];
            o0 += w.x * v0; p0 += w.x * v1;
            o1 += w.y * v0; p1 += w.y * v1;
            o2 += w.z * v0; p2 += w.z * v1;
            o3 += w.w * v0; p3 += w.w * v1;
        }
    }
    l += subgroupShuffleXor(l, 1u);         // the rows' sums over their 8 threads
    l += subgroupShuffleXor(l, 2u);
    l += subgroupShuffleXor(l, 4u);
    put_row(tok.x, g * G + (row0 + rows.x) % G, z, c, o0, p0, m.x, l.x);
    put_row(tok.y, g * G + (row0 + rows.y) % G, z, c, o1, p1, m.y, l.y);
    put_row(tok.z, g * G + (row0 + rows.z) % G, z, c, o2, p2, m.z, l.z);
    put_row(tok.w, g * G + (row0 + rows.w) % G, z, c, o3, p3, m.w, l.w);
}

//#include "attention_tiled_put_row.wgsl"   // put_row: output vec4s c, c + 8 of a row, normalised or as a part
