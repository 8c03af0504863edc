// Causal grouped-query attention for a prompt chunk with register tiles (attention.wgsl's result: for each token t of
// the pass and query head h, n = step.pos0 + t + 1, g = h / G, G = HEADS / KV_HEADS,
//   out[t, h, :] = sum_j softmax_j(SCALE * Q[t, h, :] · Kc[j, g, :]) * Vc[j, g, :]   for lo <= j < n,
//   lo = 0, or n - WINDOW in a sliding-window layer).
// One body for the three tile shapes kernels.attention_tiled builds (BR query rows a workgroup, BC keys a tile):
//   heads of 64:  BR 64, BC 32 on GPUs with subgroups of 8 or more (SG); BR 32, BC 32 without;
//   heads of 128: BR 32, BC 16 with subgroups.
// A workgroup takes BR query rows of one KV head (row i: token i / G, head g * G + i % G, token-major) and walks the
// keys in tiles of BC with each row's online softmax (running max m, sum l). Its 128 threads are 16 row groups of 8:
// thread (r, c) = (tid / 8, tid % 8) owns the RT = BR / 16 rows r + 16i and
//   scores them against the KT = BC / 8 keys c + 8j of the tile: RT x KT dot products from RT + KT vec4 reads of
//     workgroup memory a vec4 of the head;
//   then adds the tile's weighted values to the OT = HD / 32 output vec4s c + 8o of its rows: RT x OT FMAs from
//     1 + OT reads a key.
// A row's maximum over the tile is reduced across its 8 threads, and its sum of weights, kept per thread, once at
// the end: with subgroup shuffles (SG), else through workgroup memory (the key tile's, between barriers) in the same
// butterfly order (lanes 1, 2, 4), so both ways give the same bits.
// Workgroup memory: the queries (BR x HD floats), a tile's keys and values (BC x HD each): 32 KiB for both SG shapes,
// 24 KiB without (kernels.ATTENTION_TILED_MEMORY); the tile's weights exp(s - m) go where its keys were once all rows are scored (key j's for thread r's rows: vec4 j * D4 + (r ^ j % 8), component i
// for row r + 16i). No padding: each row's (key's) vec4 d sits at d ^ (row % 8), so the rows (keys) a warp reads at
// once fall in different banks.
// Split (SPLIT > 1, for passes with too few workgroups to fill the GPU): workgroup z of a row block takes the key
// tiles z, z + SPLIT, ... of its range and writes its unnormalised sums and each row's (m, l) as parts, which
// attention_combine.wgsl merges into O.
//
// A template: kernels.build renders its line statements (//% ...) and double-brace expressions with jinja2 (RT, KT,
// OT, SG and C = "xyzw"), so each shape's loops over its rows, keys and output vectors are written out as separate
// variables (arrays indexed in loops were 10x slower on the H200: session 16).
// Constants: HEADS, KV_HEADS, HD (64 or 128), BR, BC, RT, KT, OT, SG (bool), SCALE (f32), WINDOW (0: global attention), KVT (the
//   cache's element type: f32, or f16 with the shader-f16 feature; read as f32), SPLIT, TMAX (the pass's most tokens:
//   the parts' rows). With SG: subgroups of at least 8 invocations, each 8 consecutive invocations of the workgroup in
//   one subgroup (kernels.attention_tiled_rows checks the adapter's subgroup size).
// Bindings:
//   0 Q:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]
//   1 Kc:  array<vec4<KVT>>     [context, KV_HEADS * HD / 4]   (rows < step.pos0 + step.n_tokens are filled)
//   2 Vc:  array<vec4<KVT>>     [context, KV_HEADS * HD / 4]
//   3 O:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]; with SPLIT > 1 the parts: [SPLIT, TMAX, HEADS * HD / 4]
//                               sums, then [SPLIT, TMAX, HEADS] (m, l, 0, 0)
//   4 step: uniform Step
// Dispatch: (KV_HEADS, ceil(n_tokens_max * G / BR), SPLIT) workgroups of 128 threads (kernels.attention_tiled_groups);
// workgroups take the rows from the end (the most keys first); rows of tokens past step.n_tokens write nothing.

@group(0) @binding(0) var<storage, read> Q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> Kc: array<vec4<KVT>>;
@group(0) @binding(2) var<storage, read> Vc: array<vec4<KVT>>;
@group(0) @binding(3) var<storage, read_write> O: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> step: Step;

const D4: u32 = HD / 4u;          // vec4s a head
const G: u32 = HEADS / KV_HEADS;  // query heads a KV head
const WG: u32 = 128u;
const NONE: f32 = -3.0e38;        // the maximum of no score
alias SV = vec{{ KT }}<f32>;          // a row's scores of the thread's KT keys
alias SU = vec{{ KT }}<u32>;

var<workgroup> qs: array<vec4<f32>, BR * D4>;  // the rows' queries (times SCALE): row i's vec4 d at i D4 + (d ^ i % 8)
var<workgroup> ks: array<vec4<f32>, BC * D4>;  // the tile's keys (key j's vec4 d at j D4 + (d ^ j % 8)), then weights
var<workgroup> vs: array<vec4<f32>, BC * D4>;  // the tile's values, key j's vec4 d at j D4 + d

// Vec4 e of the key (value) tile at k0: key e / D4, vec4 e % D4 of KV head g, as f32; zeros past the last key n_max.
fn load_k(k0: u32, e: u32, g: u32, n_max: u32) -> vec4<f32> {
    let key = k0 + e / D4;
    if (key >= n_max) { return vec4<f32>(0.0); }
    return vec4<f32>(Kc[key * KV_HEADS * D4 + g * D4 + e % D4]);
}

fn load_v(k0: u32, e: u32, g: u32, n_max: u32) -> vec4<f32> {
    let key = k0 + e / D4;
    if (key >= n_max) { return vec4<f32>(0.0); }
    return vec4<f32>(Vc[key * KV_HEADS * D4 + g * D4 + e % D4]);
}

fn put_kv(e: u32, k: vec4<f32>, v: vec4<f32>) {
    let j = e / D4;
    ks[j * D4 + ((e % D4) ^ (j % 8u))] = k;
    vs[e] = v;
}

// A row's scores with the keys c + 8j of the tile at k0 outside [lo, n) at NONE.
fn masked(s: SV, k0: u32, c: u32, lo: u32, n: u32) -> SV {
    let key = SU(k0 + c) + SU({% for j in range(KT) %}{{ 8 * j }}u{{ ", " if not loop.last }}{% endfor %});
    return select(SV(NONE), s, (key >= SU(lo)) & (key < SU(n)));
}

// The largest of a row's scores.
fn hmax(s: SV) -> f32 {
//% if KT == 4
    return max(max(s.x, s.y), max(s.z, s.w));
//% else
    return max(s.x, s.y);
//% endif
}

// exp(s - m) of a row's masked scores: 0 where out of range (s = NONE; m is NONE only where all are).
fn weights(s: SV, m: f32) -> SV {
    return select(SV(0.0), exp(s - SV(m)), s > SV(NONE));
}

// The maximum of v over the 8 threads of this thread's row group (tid: this thread's index). Without subgroups
// the values pass through ks (vec4 tid), once no thread reads it: the caller's next barrier precedes any write.
fn lanes_max(v: vec4<f32>, tid: u32) -> vec4<f32> {
//% if SG
    var x = max(v, subgroupShuffleXor(v, 1u));
    x = max(x, subgroupShuffleXor(x, 2u));
    return max(x, subgroupShuffleXor(x, 4u));
//% else
    workgroupBarrier();
    ks[tid] = v;
    workgroupBarrier();
    let b = tid & ~7u;
    var x = ks[b];
    for (var i = 1u; i < 8u; i++) {
        x = max(x, ks[b + i]);
    }
    return x;
//% endif
}

// The sum of v over the row group's 8 threads, added as a butterfly over lanes 1, 2, 4 (with or without SG).
fn lanes_sum(v: vec4<f32>, tid: u32) -> vec4<f32> {
//% if SG
    var x = v + subgroupShuffleXor(v, 1u);
    x = x + subgroupShuffleXor(x, 2u);
    return x + subgroupShuffleXor(x, 4u);
//% else
    workgroupBarrier();
    ks[tid] = v;
    workgroupBarrier();
    let b = tid & ~7u;
    let c = tid & 7u;
    return pairs(b, c) + pairs(b, c ^ 2u) + (pairs(b, c ^ 4u) + pairs(b, c ^ 6u));
//% endif
}

//% if not SG
// ks[b + k] + ks[b + (k ^ 1)]: the butterfly's first level for lane k (lanes_sum without subgroups).
fn pairs(b: u32, k: u32) -> vec4<f32> {
    return ks[b + k] + ks[b + (k ^ 1u)];
}

//% endif
// Output vec4s c + 8o (o{o}) of token t's head h from the sums, max m and sum l: normalised into O, or (SPLIT > 1)
// as split z's part, with (m, l) written once a row.
fn put_row(t: u32, h: u32, z: u32, c: u32, {% for o in range(OT) %}o{{ o }}: vec4<f32>, {% endfor %}m: f32, l: f32) {
    if (t >= step.n_tokens) {
        return;
    }
    if (SPLIT == 1u) {
        let o = (t * HEADS + h) * D4;
//% for o in range(OT)
        O[o + c + {{ 8 * o }}u] = o{{ o }} / l;
//% endfor
        return;
    }
    let o = ((z * TMAX + t) * HEADS + h) * D4;
//% for o in range(OT)
    O[o + c + {{ 8 * o }}u] = o{{ o }};
//% endfor
    if (c == 0u) {
        O[SPLIT * TMAX * HEADS * D4 + (z * TMAX + t) * HEADS + h] = vec4<f32>(m, l, 0.0, 0.0);
    }
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
    let rows = vec4<u32>(r, r + 16u, r + 32u, r + 48u);                  // components past RT are not used
    let tok = (vec4<u32>(row0) + rows) / G;
    let n = vec4<u32>(step.pos0) + min(tok, vec4<u32>(last)) + 1u;          // keys of each row: lo <= key < n
    let lo = select(vec4<u32>(0u), n - vec4<u32>(WINDOW), (vec4<u32>(WINDOW) > vec4<u32>(0u)) & (n > vec4<u32>(WINDOW)));
    let n_max = step.pos0 + min((row0 + BR - 1u) / G, last) + 1u;     // the workgroup's keys
    let n_min = step.pos0 + min(row0 / G, last) + 1u;
    let k_start = select(0u, (n_min - WINDOW) / BC * BC, WINDOW > 0u && n_min > WINDOW);
    let xr = r % 8u;                        // the swizzle of this thread's rows (r + 16i has the same)

    // each tile is BC * D4 = 4 * WG vec4s of keys and of values: 4 a thread, the next tile's fetched meanwhile
    let k_first = k_start + z * BC;
    var k0n = load_k(k_first, tid, g, n_max); var k1n = load_k(k_first, tid + WG, g, n_max);
    var k2n = load_k(k_first, tid + 2u * WG, g, n_max); var k3n = load_k(k_first, tid + 3u * WG, g, n_max);
    var v0n = load_v(k_first, tid, g, n_max); var v1n = load_v(k_first, tid + WG, g, n_max);
    var v2n = load_v(k_first, tid + 2u * WG, g, n_max); var v3n = load_v(k_first, tid + 3u * WG, g, n_max);
    var m = vec4<f32>(NONE);                // running maxima of the rows (component i: row r + 16i)
    var l = vec4<f32>(0.0);                 // this thread's share of their running sums
    // row r + 16i's output vec4s c + 8o: a{i}_{o}
//% for i in range(RT)
//% for o in range(OT)
    var a{{ i }}_{{ o }} = vec4<f32>(0.0);
//% endfor
//% endfor
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
        // scores: row r + 16i (s{i}) against keys c + 8j (component j)
//% for i in range(RT)
        var s{{ i }} = SV(0.0);
//% endfor
        for (var d = 0u; d < D4; d++) {
            let qd = r * D4 + (d ^ xr);
            let kd = c * D4 + (d ^ c);
//% for j in range(KT)
            let x{{ j }} = ks[kd + {{ 8 * j }}u * D4];
//% endfor
//% for i in range(RT)
            let q{{ i }} = qs[qd + {{ 16 * i }}u * D4];
            s{{ i }} += SV({% for j in range(KT) %}dot(q{{ i }}, x{{ j }}){{ ", " if not loop.last }}{% endfor %});
//% endfor
        }
        // each row's maximum over the tile: this thread's keys in range, then the row group's 8 threads
//% for i in range(RT)
        s{{ i }} = masked(s{{ i }}, k0, c, lo.{{ C[i] }}, n.{{ C[i] }});
//% endfor
        let mt = vec4<f32>({% for i in range(4) %}{{ "hmax(s%d)" % i if i < RT else "NONE" }}{{ ", " if not loop.last }}{% endfor %});
        let mn = max(m, lanes_max(mt, tid));
        let f = exp(m - mn);                // rescales what the rows hold (1 while a row has seen no key)
        m = mn;
//% for i in range(RT)
        let w{{ i }} = weights(s{{ i }}, mn.{{ C[i] }});
//% endfor
        l = l * f + vec4<f32>({% for i in range(4) %}{% if i < RT %}{% for j in range(KT) %}w{{ i }}.{{ C[j] }}{{ " + " if not loop.last }}{% endfor %}{% else %}0.0{% endif %}{{ ", " if not loop.last }}{% endfor %});
        workgroupBarrier();                 // every row is scored: the keys' memory takes the weights
//% for j in range(KT)
        ks[(c + {{ 8 * j }}u) * D4 + (r ^ c)] = vec4<f32>({% for i in range(4) %}{% if i < RT %}w{{ i }}.{{ C[j] }}{% else %}0.0{% endif %}{{ ", " if not loop.last }}{% endfor %});
//% endfor
        workgroupBarrier();
//% for i in range(RT)
//% for o in range(OT)
        a{{ i }}_{{ o }} *= f.{{ C[i] }};
//% endfor
//% endfor
        for (var j = 0u; j < BC; j++) {
            let w = ks[j * D4 + (r ^ (j % 8u))];
//% for o in range(OT)
            let v{{ o }} = vs[j * D4 + c + {{ 8 * o }}u];
//% endfor
//% for i in range(RT)
//% for o in range(OT)
            a{{ i }}_{{ o }} += w.{{ C[i] }} * v{{ o }};
//% endfor
//% endfor
        }
    }
    l = lanes_sum(l, tid);                  // the rows' sums over their 8 threads
//% for i in range(RT)
    put_row(tok.{{ C[i] }}, g * G + (row0 + rows.{{ C[i] }}) % G, z, c, {% for o in range(OT) %}a{{ i }}_{{ o }}, {% endfor %}m.{{ C[i] }}, l.{{ C[i] }});
//% endfor
}
