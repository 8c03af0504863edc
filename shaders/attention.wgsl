// Causal grouped-query attention over the KV cache for a prompt chunk (decoding uses attention_decode.wgsl), for each
// token t of the pass and each query head h:
//   n = step.pos0 + t + 1 (keys up to and including its own position), g = h / G (G = HEADS / KV_HEADS),
//   out[t, h, :] = sum_j softmax_j(SCALE * Q[t, h, :] · Kc[j, g, :]) * Vc[j, g, :]   for lo <= j < n,
//   lo = 0, or n - WINDOW in a sliding-window layer (WINDOW > 0: a token sees the last WINDOW positions).
// Flash-attention style: a workgroup takes ROWS query rows of one KV head g. The pass's rows of group g are taken
// token-major over the G query heads that share g's keys and values: row i is token i / G, head g * G + i % G.
// Thread (r, c) (r < ROWS, c < D4) works on row r and owns vec4 c of its output. Keys come in tiles of BK: the
// tile's keys and values are stored in workgroup memory once for all rows (the next tile's are fetched into
// registers meanwhile); thread c of a row scores the row's keys c, c + D4, ... of the tile, and after the row's new
// max is known turns those scores into weights exp(s - m) (one exp a key); then each thread of the row updates the
// row's online softmax (running max m and sum l) and its vec4 of the weighted value sum. A row stops
// at its own causal limit; the workgroup runs to its last row's. Workgroups take the rows from the end (y = 0 the
// last ROWS), so those with the most keys start first (H200: 165 -> 139 us at 512 tokens, BENCHMARKS.md).
//
// Constants: HEADS, KV_HEADS, HD (head size: a multiple of 4, at most 1024), SCALE (f32, usually 1/sqrt(HD)),
//   ROWS (query rows a workgroup, at most 256 / (HD / 4)), BK (keys a tile, at most ROWS): kernels.attention_tile,
//   WINDOW (0: global attention). With a window the workgroup starts at the tile holding its first row's lo.
//   KVT: the cache's element type (f32, or f16 with the shader-f16 feature; read as f32).
// Bindings:
//   0 Q:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]
//   1 Kc:  array<vec4<KVT>>     [context, KV_HEADS * HD / 4]   (rows < step.pos0 + step.n_tokens are filled)
//   2 Vc:  array<vec4<KVT>>     [context, KV_HEADS * HD / 4]
//   3 O:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]
//   4 step: uniform Step
// Dispatch: (KV_HEADS, ceil(n_tokens_max * G / ROWS)) (kernels.attention_groups), ROWS * HD / 4 threads a
// workgroup; rows of tokens past step.n_tokens write nothing.
@group(0) @binding(0) var<storage, read> Q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> Kc: array<vec4<KVT>>;
@group(0) @binding(2) var<storage, read> Vc: array<vec4<KVT>>;
@group(0) @binding(3) var<storage, read_write> O: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> step: Step;

const D4: u32 = HD / 4u;          // vec4s a head
const G: u32 = HEADS / KV_HEADS;  // query heads a KV head
const WG: u32 = ROWS * D4;
const KP: u32 = D4 + 1u;          // vec4s a key in ks: padded so threads scoring consecutive keys read other banks
const SP: u32 = BK + 1u;          // scores a row in s
const KPT: u32 = (BK + D4 - 1u) / D4;   // keys a thread scores

var<workgroup> qs: array<vec4<f32>, WG>;       // the rows' queries
var<workgroup> ks: array<vec4<f32>, BK * KP>;  // the tile's keys
var<workgroup> vs: array<vec4<f32>, BK * D4>;  // and values
var<workgroup> s: array<f32, ROWS * SP>;       // the rows' scores of the tile

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let g = wid.x;
    let row0 = (nwg.y - 1u - wid.y) * ROWS;   // the last rows (the most keys) first
    if (row0 / G >= step.n_tokens) {
        return;
    }
    let r = tid / D4;
    let c = tid % D4;
    let t = (row0 + r) / G;
    let h = g * G + (row0 + r) % G;
    let tq = min(t, step.n_tokens - 1u);   // rows past the pass's end compute its last token's and write nothing
    qs[tid] = Q[(tq * HEADS + h) * D4 + c];
    let n = step.pos0 + tq + 1u;
    let n_max = step.pos0 + min((row0 + ROWS - 1u) / G, step.n_tokens - 1u) + 1u;
    let n_min = step.pos0 + min(row0 / G, step.n_tokens - 1u) + 1u;      // the first row's key count
    let lo = select(0u, n - WINDOW, WINDOW > 0u && n > WINDOW);          // this row's first key
    let k_start = select(0u, (n_min - WINDOW) / BK * BK, WINDOW > 0u && n_min > WINDOW);
    // thread (r, c) with r < BK loads vec4 c of key r of each tile
    let kv_stride = KV_HEADS * D4;
    let col = g * D4 + c;
    let loads = r < BK;
    var k_next = vec4<f32>(0.0);
    var v_next = vec4<f32>(0.0);
    if (loads && k_start + r < n_max) {
        k_next = vec4<f32>(Kc[(k_start + r) * kv_stride + col]);
        v_next = vec4<f32>(Vc[(k_start + r) * kv_stride + col]);
    }
    var m = -3.0e38;                  // running max
    var l = 0.0;                      // running sum of exp
    var acc = vec4<f32>(0.0);
    for (var k0 = k_start; k0 < n_max; k0 += BK) {
        if (loads) {
            ks[r * KP + c] = k_next;
            vs[r * D4 + c] = v_next;
        }
        workgroupBarrier();
        let key = k0 + BK + r;
        if (loads && key < n_max) {
            k_next = vec4<f32>(Kc[key * kv_stride + col]);
            v_next = vec4<f32>(Vc[key * kv_stride + col]);
        }
        let jn = select(0u, min(BK, n - k0), n > k0);   // the row's keys in this tile: jl <= j < jn
        let jl = select(0u, lo - k0, lo > k0);
        for (var i = 0u; i < KPT; i++) {
            let j = c + i * D4;
            if (j >= jl && j < jn) {
                var dv = vec4<f32>(0.0);
                for (var d = 0u; d < D4; d++) {
                    dv += qs[r * D4 + d] * ks[j * KP + d];
                }
                s[r * SP + j] = SCALE * ((dv.x + dv.y) + (dv.z + dv.w));
            }
        }
        workgroupBarrier();
        // loops of constant length, the scores of keys past jn masked; each thread of a row finds the row's new
        // max, then turns the scores it computed into weights (one exp a key, not one a key and thread)
        var m_new = m;
        for (var j = 0u; j < BK; j++) {
            m_new = select(m_new, max(m_new, s[r * SP + j]), j >= jl && j < jn);
        }
        workgroupBarrier();
        for (var i = 0u; i < KPT; i++) {
            let j = c + i * D4;
            if (j < BK) {
                s[r * SP + j] = select(0.0, exp(s[r * SP + j] - m_new), j >= jl && j < jn);
            }
        }
        workgroupBarrier();
        let alpha = exp(m - m_new);
        l *= alpha;
        acc *= alpha;
        for (var j = 0u; j < BK; j++) {
            let p = s[r * SP + j];
            l += p;
            acc += p * vs[j * D4 + c];
        }
        m = m_new;
        workgroupBarrier();
    }
    if (t < step.n_tokens) {
        O[(t * HEADS + h) * D4 + c] = acc / l;
    }
}
