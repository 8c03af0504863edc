// Causal grouped-query attention over the KV cache for a prompt chunk (decoding uses attention_decode.wgsl), for each
// token t of the pass and each query head h:
//   n = step.pos0 + t + 1 (keys up to and including its own position), g = h / G (G = HEADS / KV_HEADS),
//   out[t, h, :] = sum_j softmax_j(SCALE * Q[t, h, :] · Kc[j, g, :]) * Vc[j, g, :]   for lo <= j < n,
//   lo = 0, or n - WINDOW in a sliding-window layer (WINDOW > 0: a token sees the last WINDOW positions).
// Flash-attention style, one query row per LPR threads: a workgroup takes ROWS query rows of one KV head g, token-major
// over the G query heads that share g's keys and values (row i is token i / G, head g * G + i % G). Each row's LPR
// threads hold its query (times SCALE) and its output accumulator in registers, DL = HD / 4 / LPR vec4s each. Keys and
// values come in tiles of BK, stored in workgroup memory once for all rows; a thread scores the tile's keys against
// its part of the query (the LPR parts summed in workgroup memory when LPR > 1), then updates the row's online softmax
// (running max m, running sum l) and its accumulator. Barriers only around each tile's store (two a tile, three with
// LPR > 1), and every workgroup-memory read in the key loops is the same address for all threads of a row group (a
// broadcast). Workgroups take the rows from the end (y = 0 the last ROWS), so those with the most keys start first.
//
// Constants: HEADS, KV_HEADS, HD (head size: a multiple of 4), SCALE (f32, usually 1/sqrt(HD)), LPR (threads a row,
//   dividing HD / 4), ROWS (rows a workgroup), BK (keys a tile): kernels.attention_tile; WINDOW (0: global
//   attention; with a window the workgroup starts at the tile holding its first row's lo).
// Bindings:
//   0 Q:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]
//   1 Kc:  array<vec4<f32>>     [context, KV_HEADS * HD / 4]   (rows < step.pos0 + step.n_tokens are filled)
//   2 Vc:  array<vec4<f32>>     [context, KV_HEADS * HD / 4]
//   3 O:   array<vec4<f32>>     [n_tokens, HEADS * HD / 4]
//   4 step: uniform Step
// Dispatch: (KV_HEADS, ceil(n_tokens_max * G / ROWS)) (kernels.attention_groups), ROWS * LPR threads a workgroup;
// rows of tokens past step.n_tokens write nothing.
@group(0) @binding(0) var<storage, read> Q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> Kc: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> Vc: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> O: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> step: Step;

const D4: u32 = HD / 4u;          // vec4s a head
const DL: u32 = D4 / LPR;         // vec4s a thread
const G: u32 = HEADS / KV_HEADS;  // query heads a KV head
const WG: u32 = ROWS * LPR;
const PART: u32 = select(1u, WG * BK, LPR > 1u);

var<workgroup> ks: array<vec4<f32>, BK * D4>;  // the tile's keys
var<workgroup> vs: array<vec4<f32>, BK * D4>;  // and values
var<workgroup> part: array<f32, PART>;         // each thread's partial scores of the tile (LPR > 1)

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let g = wid.x;
    let row0 = (nwg.y - 1u - wid.y) * ROWS;   // the last rows (the most keys) first
    if (row0 / G >= step.n_tokens) {
        return;
    }
    let r = tid / LPR;
    let c0 = (tid % LPR) * DL;                // this thread's first vec4 of the head
    let t = (row0 + r) / G;
    let h = g * G + (row0 + r) % G;
    let tq = min(t, step.n_tokens - 1u);      // rows past the pass's end compute its last token's and write nothing
    var q: array<vec4<f32>, DL>;
    var acc: array<vec4<f32>, DL>;
    for (var d = 0u; d < DL; d++) {
        q[d] = Q[(tq * HEADS + h) * D4 + c0 + d] * SCALE;
        acc[d] = vec4<f32>(0.0);
    }
    let n = step.pos0 + tq + 1u;
    let n_max = step.pos0 + min((row0 + ROWS - 1u) / G, step.n_tokens - 1u) + 1u;   // the workgroup's last key + 1
    let n_min = step.pos0 + min(row0 / G, step.n_tokens - 1u) + 1u;                // the first row's key count
    let lo = select(0u, n - WINDOW, WINDOW > 0u && n > WINDOW);                    // this row's first key
    let k_start = select(0u, (n_min - WINDOW) / BK * BK, WINDOW > 0u && n_min > WINDOW);
    let kv_stride = KV_HEADS * D4;
    var m = -3.0e38;                  // running max
    var l = 0.0;                      // running sum of exp
    for (var k0 = k_start; k0 < n_max; k0 += BK) {
        workgroupBarrier();           // the previous tile is used up
        for (var i = tid; i < BK * D4; i += WG) {
            let key = k0 + i / D4;
            var kv = vec4<f32>(0.0);  // keys past the workgroup's last stay 0 (cache rows there may hold anything)
            var vv = vec4<f32>(0.0);
            if (key < n_max) {
                kv = Kc[key * kv_stride + g * D4 + i % D4];
                vv = Vc[key * kv_stride + g * D4 + i % D4];
            }
            ks[i] = kv;
            vs[i] = vv;
        }
        workgroupBarrier();
        var s: array<f32, BK>;
        for (var j = 0u; j < BK; j++) {
            var dv = vec4<f32>(0.0);
            for (var d = 0u; d < DL; d++) {
                dv += q[d] * ks[j * D4 + c0 + d];
            }
            s[j] = (dv.x + dv.y) + (dv.z + dv.w);
        }
        if (LPR > 1u) {               // sum the row's LPR partial scores
            for (var j = 0u; j < BK; j++) { part[tid * BK + j] = s[j]; }
            workgroupBarrier();
            for (var j = 0u; j < BK; j++) {
                var sum = 0.0;
                for (var p = 0u; p < LPR; p++) { sum += part[((r * LPR) + p) * BK + j]; }
                s[j] = sum;
            }
        }
        let jn = select(0u, min(BK, n - k0), n > k0);   // the row's keys in this tile: jl <= j < jn
        let jl = select(0u, lo - k0, lo > k0);
        var m_new = m;
        for (var j = 0u; j < BK; j++) {
            m_new = select(m_new, max(m_new, s[j]), j >= jl && j < jn);
        }
        let alpha = exp(m - m_new);
        l *= alpha;
        for (var d = 0u; d < DL; d++) { acc[d] *= alpha; }
        for (var j = 0u; j < BK; j++) {
            let p = select(0.0, exp(s[j] - m_new), j >= jl && j < jn);
            l += p;
            for (var d = 0u; d < DL; d++) {
                acc[d] += p * vs[j * D4 + c0 + d];
            }
        }
        m = m_new;
    }
    if (t < step.n_tokens) {
        for (var d = 0u; d < DL; d++) {
            O[(t * HEADS + h) * D4 + c0 + d] = acc[d] / l;
        }
    }
}
