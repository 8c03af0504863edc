// Causal grouped-query attention for a prompt chunk with register tiles, for heads of 64 (attention.wgsl's result:
// for each token t of the pass and query head h, n = step.pos0 + t + 1, g = h / G (G = HEADS / KV_HEADS),
//   out[t, h, :] = sum_j softmax_j(SCALE * Q[t, h, :] · Kc[j, g, :]) * Vc[j, g, :]   for lo <= j < n,
//   lo = 0, or n - WINDOW in a sliding-window layer).
// A workgroup takes 32 query rows of one KV head (row i: token i / G, head g * G + i % G, taken token-major as in
// attention.wgsl) and walks the keys in tiles of 32, keeping each row's online softmax (running max m, sum l). The
// 128 threads work in groups of 8 on a pair of rows: thread (p, c) = (tid / 8, tid % 8) scores rows 2p, 2p + 1
// against keys c, c + 8, c + 16, c + 24 of the tile (8 scores from 6 vec4 reads of workgroup memory a vec4 of the
// head), and then adds the tile's weighted values to output vec4s c and c + 8 of both rows (16 FMAs from 4 reads a
// key). So a tile costs 4 barriers for 32 x 32 scores; attention.wgsl pays as many for 16 x 16.
// The tile's keys and values sit in workgroup memory (the next tile's are fetched into registers meanwhile), the
// rows' queries too; scores pass through workgroup memory once as weights exp(s - m).
// Workgroup memory: 30 KiB (kernels.attention_tiled_fits checks the device's limit; attention.wgsl serves others).
// Split (SPLIT > 1, for passes with too few workgroups to fill the GPU): workgroup z of a row block takes the key
// tiles z, z + SPLIT, ... of its range and writes its unnormalised sums and each row's (m, l) as parts, which
// attention_combine.wgsl merges into O.
//
// Constants: HEADS, KV_HEADS, HD (64), SCALE (f32), WINDOW (0: global attention), KVT (the cache's element type:
//   f32, or f16 with the shader-f16 feature; read as f32), SPLIT, TMAX (the pass's most tokens: the parts' rows).
// Bindings:
//   0 Q:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]
//   1 Kc:  array<vec4<KVT>>     [context, KV_HEADS * HD / 4]   (rows < step.pos0 + step.n_tokens are filled)
//   2 Vc:  array<vec4<KVT>>     [context, KV_HEADS * HD / 4]
//   3 O:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]; with SPLIT > 1 the parts: [SPLIT, TMAX, HEADS * HD / 4]
//                               sums, then [SPLIT, TMAX, HEADS] (m, l, 0, 0)
//   4 step: uniform Step
// Dispatch: (KV_HEADS, ceil(n_tokens_max * G / 32), SPLIT) workgroups of 128 threads (kernels.attention_tiled_groups);
// workgroups take the rows from the end (the most keys first); rows of tokens past step.n_tokens write nothing.
// The bindings and load_k / load_v (the key and value tiles): attention_tiled_io.wgsl.
//#include "attention_tiled_io.wgsl"

const D4: u32 = HD / 4u;          // vec4s a head (16)
const G: u32 = HEADS / KV_HEADS;  // query heads a KV head
const BR: u32 = 32u;              // query rows a workgroup
const BC: u32 = 32u;              // keys a tile
const WG: u32 = 128u;
const KP: u32 = D4 + 1u;          // vec4s a key in ks: padded so the 8 threads of a row pair read other banks
const SP: u32 = BC + 1u;          // weights a row in s

var<workgroup> qs: array<vec4<f32>, BR * D4>;  // the rows' queries
var<workgroup> ks: array<vec4<f32>, BC * KP>;  // the tile's keys
var<workgroup> vs: array<vec4<f32>, BC * D4>;  // and values
var<workgroup> s: array<f32, BR * SP>;         // the rows' weights exp(score - m) of the tile
var<workgroup> pm: array<f32, BR * 8u>;        // each row's 8 partial maxima of the tile

fn put_kv(e: u32, k: vec4<f32>, v: vec4<f32>) {
    ks[(e / D4) * KP + e % D4] = k;
    vs[e] = v;
}

// Which of the keys k0 + c + 8i (component i) are in [lo, n).
fn in_range(k0: u32, c: u32, lo: u32, n: u32) -> vec4<bool> {
    let key = vec4<u32>(k0 + c) + vec4<u32>(0u, 8u, 16u, 24u);
    return (key >= vec4<u32>(lo)) & (key < vec4<u32>(n));
}

// The largest of v's components whose key is in range, and -3e38 if none.
fn masked_max(v: vec4<f32>, ok: vec4<bool>) -> f32 {
    let w = select(vec4<f32>(-3.0e38), v, ok);
    return max(max(w.x, w.y), max(w.z, w.w));
}

// Row r's weights exp(v - m) of the keys this thread scored (0 out of range).
fn put_weights(r: u32, v: vec4<f32>, m: f32, ok: vec4<bool>, c: u32) {
    let w = select(vec4<f32>(0.0), exp(v - vec4<f32>(m)), ok);
    s[r * SP + c] = w.x;
    s[r * SP + c + 8u] = w.y;
    s[r * SP + c + 16u] = w.z;
    s[r * SP + c + 24u] = w.w;
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
    // the rows' queries: vec4 e of row e / D4
    for (var i = 0u; i < BR * D4 / WG; i++) {
        let e = tid + i * WG;
        let rt = min((row0 + e / D4) / G, last);
        qs[e] = Q[(rt * HEADS + g * G + (row0 + e / D4) % G) * D4 + e % D4];
    }
    let p = tid / 8u;
    let c = tid % 8u;
    let ra = 2u * p;                        // this thread's rows ra, ra + 1
    let ta = (row0 + ra) / G;
    let tb = (row0 + ra + 1u) / G;
    let na = step.pos0 + min(ta, last) + 1u;           // keys of each row: lo <= key < n
    let nb = step.pos0 + min(tb, last) + 1u;
    let loa = select(0u, na - WINDOW, WINDOW > 0u && na > WINDOW);
    let lob = select(0u, nb - WINDOW, WINDOW > 0u && nb > WINDOW);
    let n_max = step.pos0 + min((row0 + BR - 1u) / G, last) + 1u;     // the workgroup's keys
    let n_min = step.pos0 + min(row0 / G, last) + 1u;
    let k_start = select(0u, (n_min - WINDOW) / BC * BC, WINDOW > 0u && n_min > WINDOW);

    let k_first = k_start + z * BC;
    var k0n = load_k(k_first, tid, g, n_max); var k1n = load_k(k_first, tid + WG, g, n_max);
    var k2n = load_k(k_first, tid + 2u * WG, g, n_max); var k3n = load_k(k_first, tid + 3u * WG, g, n_max);
    var v0n = load_v(k_first, tid, g, n_max); var v1n = load_v(k_first, tid + WG, g, n_max);
    var v2n = load_v(k_first, tid + 2u * WG, g, n_max); var v3n = load_v(k_first, tid + 3u * WG, g, n_max);
    var ma = -3.0e38; var mb = -3.0e38;     // running maxima
    var la = 0.0; var lb = 0.0;             // running sums
    var a0 = vec4<f32>(0.0); var a1 = vec4<f32>(0.0);   // row ra: output vec4s c, c + 8
    var b0 = vec4<f32>(0.0); var b1 = vec4<f32>(0.0);   // row ra + 1
    for (var k0 = k_first; k0 < n_max; k0 += SPLIT * BC) {
        workgroupBarrier();                 // the previous tile's values and weights are read
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
        // scores of rows ra, ra + 1 against keys c + 8i
        var sa = vec4<f32>(0.0);
        var sb = vec4<f32>(0.0);
        for (var d = 0u; d < D4; d++) {
            let qa = qs[ra * D4 + d];
            let qb = qs[(ra + 1u) * D4 + d];
            let x0 = ks[c * KP + d];
            let x1 = ks[(c + 8u) * KP + d];
            let x2 = ks[(c + 16u) * KP + d];
            let x3 = ks[(c + 24u) * KP + d];
            sa += vec4<f32>(dot(qa, x0), dot(qa, x1), dot(qa, x2), dot(qa, x3));
            sb += vec4<f32>(dot(qb, x0), dot(qb, x1), dot(qb, x2), dot(qb, x3));
        }
        sa *= SCALE;
        sb *= SCALE;
        let oka = in_range(k0, c, loa, na);
        let okb = in_range(k0, c, lob, nb);
        pm[ra * 8u + c] = masked_max(sa, oka);
        pm[(ra + 1u) * 8u + c] = masked_max(sb, okb);
        workgroupBarrier();
        var mna = ma;
        var mnb = mb;
        for (var i = 0u; i < 8u; i++) {
            mna = max(mna, pm[ra * 8u + i]);
            mnb = max(mnb, pm[(ra + 1u) * 8u + i]);
        }
        put_weights(ra, sa, mna, oka, c);
        put_weights(ra + 1u, sb, mnb, okb, c);
        workgroupBarrier();
        let fa = exp(ma - mna);
        let fb = exp(mb - mnb);
        la *= fa; a0 *= fa; a1 *= fa;
        lb *= fb; b0 *= fb; b1 *= fb;
        for (var j = 0u; j < BC; j++) {
            let wa = s[ra * SP + j];
            let wb = s[(ra + 1u) * SP + j];
            let v0 = vs[j * D4 + c];
            let v1 = vs[j * D4 + c + 8u];
            la += wa; lb += wb;
            a0 += wa * v0; a1 += wa * v1;
            b0 += wb * v0; b1 += wb * v1;
        }
        ma = mna;
        mb = mnb;
    }
    put_row(ta, g * G + (row0 + ra) % G, z, c, a0, a1, ma, la);
    put_row(tb, g * G + (row0 + ra + 1u) % G, z, c, b0, b1, mb, lb);
}

//#include "attention_tiled_put_row.wgsl"   // put_row: output vec4s c, c + 8 of a row, normalised or as a part
