// Causal grouped-query attention for a prompt chunk, for heads of 128 on GPUs with subgroups (attention.wgsl's
// result: for each token t of the pass and query head h, n = step.pos0 + t + 1, g = h / G, G = HEADS / KV_HEADS,
//   out[t, h, :] = sum_j softmax_j(SCALE * Q[t, h, :] · Kc[j, g, :]) * Vc[j, g, :]   for lo <= j < n,
//   lo = 0, or n - WINDOW in a sliding-window layer).
// attention_tiled64.wgsl's scheme at twice the head: a workgroup takes 32 query rows of one KV head (row i: token
// i / G, head g * G + i % G) and walks the keys in tiles of 16 with each row's online softmax. Its 128 threads are 16
// row groups of 8: thread (r, c) = (tid / 8, tid % 8) owns rows r and r + 16 and
//   scores them against keys c and c + 8 of the tile: 4 dot products from 4 vec4 reads a vec4 of the head;
//   then adds the tile's weighted values to output vec4s c, c + 8, c + 16, c + 24 of both rows: 32 FMAs from 5
//     reads a key (attention.wgsl: 4 FMAs from 2).
// Row maxima over a tile: subgroup shuffles across the row's 8 threads; sums of weights kept per thread and reduced
// once at the end. Workgroup memory: exactly 32 KiB (queries 16, a tile's keys 8, values 8); the tile's weights go
// where its keys were once all rows are scored (key j's for rows r, r + 16 in components 2 (r % 2), +1 of vec4
// j * 8 + r / 2). No padding: each row's (key's) vec4 d sits at d ^ (row % 8).
// Split (SPLIT > 1): as attention_tiled.wgsl, workgroup z takes key tiles z, z + SPLIT, ... and writes unnormalised
// sums and each row's (m, l) for attention_combine.wgsl.
//
// Constants: HEADS, KV_HEADS, HD (128), SCALE (f32), WINDOW (0: global attention), KVT (the cache's element type:
//   f32, or f16 with the shader-f16 feature; read as f32), SPLIT, TMAX (the pass's most tokens: the parts' rows).
// Needs subgroups of at least 8 invocations, each 8 consecutive invocations of the workgroup in one subgroup
// (kernels.attention_tiled_rows checks the adapter's subgroup size).
// Bindings:
//   0 Q:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]
//   1 Kc:  array<vec4<KVT>>     [context, KV_HEADS * HD / 4]   (rows < step.pos0 + step.n_tokens are filled)
//   2 Vc:  array<vec4<KVT>>     [context, KV_HEADS * HD / 4]
//   3 O:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]; with SPLIT > 1 the parts: [SPLIT, TMAX, HEADS * HD / 4]
//                               sums, then [SPLIT, TMAX, HEADS] (m, l, 0, 0)
//   4 step: uniform Step
// Dispatch: (KV_HEADS, ceil(n_tokens_max * G / 32), SPLIT) workgroups of 128 threads (kernels.attention_tiled_groups
// with rows 32); workgroups take the rows from the end (the most keys first); rows past step.n_tokens write nothing.
// The bindings and load_k / load_v (the key and value tiles): attention_tiled_io.wgsl.
//#include "attention_tiled_io.wgsl"

const D4: u32 = HD / 4u;          // vec4s a head (32)
const G: u32 = HEADS / KV_HEADS;  // query heads a KV head
const BR: u32 = 32u;              // query rows a workgroup
const BC: u32 = 16u;              // keys a tile
const WG: u32 = 128u;
const NONE: f32 = -3.0e38;        // the maximum of no score

var<workgroup> qs: array<vec4<f32>, BR * D4>;  // the rows' queries (times SCALE): row i's vec4 d at i D4 + (d ^ i % 8)
var<workgroup> ks: array<vec4<f32>, BC * D4>;  // the tile's keys (key j's vec4 d at j D4 + (d ^ j % 8)), then weights
var<workgroup> vs: array<vec4<f32>, BC * D4>;  // the tile's values, key j's vec4 d at j D4 + d

fn put_kv(e: u32, k: vec4<f32>, v: vec4<f32>) {
    let j = e / D4;
    ks[j * D4 + ((e % D4) ^ (j % 8u))] = k;
    vs[e] = v;
}

// A row's scores (components: keys c, c + 8 of the tile at k0), those out of range at NONE.
fn masked(s: vec2<f32>, k0: u32, c: u32, lo: u32, n: u32) -> vec2<f32> {
    let key = vec2<u32>(k0 + c) + vec2<u32>(0u, 8u);
    return select(vec2<f32>(NONE), s, (key >= vec2<u32>(lo)) & (key < vec2<u32>(n)));
}

// exp(s - m) of a row's masked scores: 0 where out of range (s = NONE; m is NONE only where all are).
fn weights(s: vec2<f32>, m: f32) -> vec2<f32> {
    return select(vec2<f32>(0.0), exp(s - vec2<f32>(m)), s > vec2<f32>(NONE));
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
    let rows = vec2<u32>(r, r + 16u);
    let tok = (vec2<u32>(row0) + rows) / G;
    let n = vec2<u32>(step.pos0) + min(tok, vec2<u32>(last)) + 1u;          // keys of each row: lo <= key < n
    let lo = select(vec2<u32>(0u), n - vec2<u32>(WINDOW), (vec2<u32>(WINDOW) > vec2<u32>(0u)) & (n > vec2<u32>(WINDOW)));
    let n_max = step.pos0 + min((row0 + BR - 1u) / G, last) + 1u;     // the workgroup's keys
    let n_min = step.pos0 + min(row0 / G, last) + 1u;
    let k_start = select(0u, (n_min - WINDOW) / BC * BC, WINDOW > 0u && n_min > WINDOW);
    let xr = r % 8u;                        // the swizzle of this thread's rows (r + 16 has the same)
    let wi = r / 2u;                        // its weights: vec4 j * 8 + wi, components 2 (r % 2), +1
    let odd = r % 2u == 1u;

    let k_first = k_start + z * BC;
    var k0n = load_k(k_first, tid, g, n_max); var k1n = load_k(k_first, tid + WG, g, n_max);
    var k2n = load_k(k_first, tid + 2u * WG, g, n_max); var k3n = load_k(k_first, tid + 3u * WG, g, n_max);
    var v0n = load_v(k_first, tid, g, n_max); var v1n = load_v(k_first, tid + WG, g, n_max);
    var v2n = load_v(k_first, tid + 2u * WG, g, n_max); var v3n = load_v(k_first, tid + 3u * WG, g, n_max);
    var m = vec2<f32>(NONE);                // running maxima of rows r, r + 16
    var l = vec2<f32>(0.0);                 // this thread's share of their running sums
    var a0 = vec4<f32>(0.0); var a1 = vec4<f32>(0.0); var a2 = vec4<f32>(0.0); var a3 = vec4<f32>(0.0);  // row r
    var b0 = vec4<f32>(0.0); var b1 = vec4<f32>(0.0); var b2 = vec4<f32>(0.0); var b3 = vec4<f32>(0.0);  // r + 16
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
        // scores: row r (sa) and r + 16 (sb) against keys c, c + 8
        var sa = vec2<f32>(0.0);
        var sb = vec2<f32>(0.0);
        for (var d = 0u; d < D4; d++) {
            let qd = r * D4 + (d ^ xr);
            let qa = qs[qd];
            let qb = qs[qd + 16u * D4];
            let kd = c * D4 + (d ^ c);
            let x0 = ks[kd];
            let x1 = ks[kd + 8u * D4];
            sa += vec2<f32>(dot(qa, x0), dot(qa, x1));
            sb += vec2<f32>(dot(qb, x0), dot(qb, x1));
        }
        sa = masked(sa, k0, c, lo.x, n.x);
        sb = masked(sb, k0, c, lo.y, n.y);
        // each row's maximum over the tile: this thread's 2 keys, then the row group's 8 threads
        var mt = vec2<f32>(max(sa.x, sa.y), max(sb.x, sb.y));
        mt = max(mt, subgroupShuffleXor(mt, 1u));
        mt = max(mt, subgroupShuffleXor(mt, 2u));
        mt = max(mt, subgroupShuffleXor(mt, 4u));
        let mn = max(m, mt);
        let wa = weights(sa, mn.x);
        let wb = weights(sb, mn.y);
        let f = exp(m - mn);                // rescales what the rows hold (1 while a row has seen no key)
        m = mn;
        l = l * f + vec2<f32>(wa.x + wa.y, wb.x + wb.y);
        workgroupBarrier();                 // every row is scored: the keys' memory takes the weights
        if (odd) {
            ks[c * 8u + wi].z = wa.x; ks[c * 8u + wi].w = wb.x;
            ks[(c + 8u) * 8u + wi].z = wa.y; ks[(c + 8u) * 8u + wi].w = wb.y;
        } else {
            ks[c * 8u + wi].x = wa.x; ks[c * 8u + wi].y = wb.x;
            ks[(c + 8u) * 8u + wi].x = wa.y; ks[(c + 8u) * 8u + wi].y = wb.y;
        }
        workgroupBarrier();
        a0 *= f.x; a1 *= f.x; a2 *= f.x; a3 *= f.x;
        b0 *= f.y; b1 *= f.y; b2 *= f.y; b3 *= f.y;
        for (var j = 0u; j < BC; j++) {
            let wv = ks[j * 8u + wi];
            let w = select(wv.xy, wv.zw, odd);
            let v = j * D4 + c;
            let v0 = vs[v];
            let v1 = vs[v + 8u];
            let v2 = vs[v + 16u];
            let v3 = vs[v + 24u];
            a0 += w.x * v0; a1 += w.x * v1; a2 += w.x * v2; a3 += w.x * v3;
            b0 += w.y * v0; b1 += w.y * v1; b2 += w.y * v2; b3 += w.y * v3;
        }
    }
    l += subgroupShuffleXor(l, 1u);         // the rows' sums over their 8 threads
    l += subgroupShuffleXor(l, 2u);
    l += subgroupShuffleXor(l, 4u);
    put_row(tok.x, g * G + (row0 + rows.x) % G, z, c, a0, a1, a2, a3, m.x, l.x);
    put_row(tok.y, g * G + (row0 + rows.y) % G, z, c, b0, b1, b2, b3, m.y, l.y);
}

// Output vec4s c, c + 8, c + 16, c + 24 of token t's head h from sums o0..o3, max m and sum l: normalised into O,
// or (SPLIT > 1) as split z's part, with (m, l) written once a row.
fn put_row(t: u32, h: u32, z: u32, c: u32, o0: vec4<f32>, o1: vec4<f32>, o2: vec4<f32>, o3: vec4<f32>, m: f32,
           l: f32) {
    if (t >= step.n_tokens) {
        return;
    }
    var o = (t * HEADS + h) * D4;
    var s = 1.0 / l;
    if (SPLIT > 1u) {
        o = ((z * TMAX + t) * HEADS + h) * D4;
        s = 1.0;
        if (c == 0u) {
            O[SPLIT * TMAX * HEADS * D4 + (z * TMAX + t) * HEADS + h] = vec4<f32>(m, l, 0.0, 0.0);
        }
    }
    O[o + c] = o0 * s;
    O[o + c + 8u] = o1 * s;
    O[o + c + 16u] = o2 * s;
    O[o + c + 24u] = o3 * s;
}
