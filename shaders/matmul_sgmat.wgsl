// Matrix-matrix product for prefill on subgroup matrices (tensor cores: Chromium's chromium-experimental-subgroup-
// matrix, where the adapter offers an f16 x f16 -> f32 configuration SM x SN x SK), from f16 copies of the inputs
// (half_rows.wgsl: normalised there) and of a slab of the weight's rows (dequant_half.wgsl):
//   Y[t, YOFF + n] (+)= sum_k WH[n, k] * XH[t, k]                                (n < S)
//   GLU: Y[t, YOFF + n] = act(WH[n, :] · XH[t]) * (WH[SP + n, :] · XH[t])        (act: SiLU, or GELU-tanh with GELU)
// Each workgroup computes a tile of TT tokens x TR rows with GT x GR subgroups of SGSIZE threads; each subgroup a block
// of BT x BR result matrices (BT SM tokens x BR SN rows; GLU: as many more for the up rows), i.e. TT = GT BT SM and
// TR = GR BR SN. It walks K in steps of SK, loading its BT left matrices (tokens x k, row-major from XH) and BR right
// ones (k x rows: weight rows of WH read column-major) straight from the buffers (the neighbouring subgroups' loads of
// the same rows meet in the cache), and multiply-accumulates in f32. At the end each subgroup passes its result
// matrices one at a time through its own part of workgroup memory (outs: SM x SN f32, and as many for the up rows),
// from which each of its lanes writes its share into Y.
//
// Constants: K (a multiple of SK), S (rows: a slab of the weight), SP (S rounded up to TR: where WH's up rows start),
//   ACCUM, GLU, GELU, YSTRIDE, YOFF, SM, SN, SK (the subgroup matrix configuration), SGSIZE (threads a subgroup: the
//   adapter's only subgroup size), GT, GR, BT, BR, EMULATE; kernels.matmul_sgmat.
//   A template (kernels.build renders the //% lines with jinja2): the accumulators are separate variables. EMULATE
//   (tests: adapters without subgroup matrices) swaps the subgroup matrix built-ins for plain WGSL reading the f16
//   pairs as u32 (each lane of a "subgroup" computes its share of a result's elements); the rest is the same text.
// Bindings:
//   0 WH: array<f16>             [HALVES * SP, K] the slab's rows in f16 (EMULATE: array<u32>, pairs)
//   1 XH: array<f16>             [tokens rounded up to TT, K] the inputs in f16 (EMULATE: array<u32>)
//   2 Y: array<f32>              [n_tokens, YSTRIDE]
//   3 step: uniform Step
// Dispatch: (SP / TR, ceil(n_tokens_max / TT)) workgroups of GT * GR * SGSIZE threads (kernels.sgmat_groups); token
// tiles past the pass's end return at once.
//% set MMA = "mma" if EMULATE else "subgroupMatrixMultiplyAccumulate"
//% if EMULATE
@group(0) @binding(0) var<storage, read> WH: array<u32>;
@group(0) @binding(1) var<storage, read> XH: array<u32>;
//% else
@group(0) @binding(0) var<storage, read> WH: array<f16>;
@group(0) @binding(1) var<storage, read> XH: array<f16>;
//% endif
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;

const WG: u32 = GT * GR * SGSIZE;                // threads
const TT: u32 = GT * BT * SM;                    // tokens of the tile
const TR: u32 = GR * BR * SN;                    // rows of the tile
const HALVES: u32 = select(1u, 2u, GLU);         // gate (and up) rows
const PART: u32 = HALVES * SM * SN;              // a subgroup's part of outs

var<workgroup> outs: array<f32, GT * GR * PART>; // per subgroup: a result matrix [token][row] (GLU: then its up one)

// The subgroup matrices: left (SM tokens x SK k of XH, row-major), right (SK k x SN rows: rows of WH read
// column-major), result (SM tokens x SN rows, f32), multiply-accumulate MMA.
//% if EMULATE
// (emulated: a left / right matrix is its element offset in XH / WH, read by mma; a lane of a "subgroup" holds its
// share of a result's elements, element e = lane + q SGSIZE in its q-th slot, being token e / SN, row e % SN)
const QN: u32 = SM * SN / SGSIZE;     // a lane's elements of a result
alias Result = array<f32, QN>;
var<private> lane: u32;

fn left(t: u32, k: u32) -> u32 {
    return t * K + k;
}

fn right(r: u32, k: u32) -> u32 {
    return r * K + k;
}

fn xh(e: u32) -> f32 {
    return unpack2x16float(XH[e / 2u])[e % 2u];
}

fn wh(e: u32) -> f32 {
    return unpack2x16float(WH[e / 2u])[e % 2u];
}

fn mma(a: u32, b: u32, c: Result) -> Result {
    var d = c;
    for (var q = 0u; q < QN; q++) {
        let e = lane + q * SGSIZE;
        for (var j = 0u; j < SK; j++) { d[q] += xh(a + (e / SN) * K + j) * wh(b + (e % SN) * K + j); }
    }
    return d;
}

fn put_out(at: u32, c: Result) {
    for (var q = 0u; q < QN; q++) { outs[at + lane + q * SGSIZE] = c[q]; }
}
//% else
alias Result = subgroup_matrix_result<f32, SN, SM>;

fn left(t: u32, k: u32) -> subgroup_matrix_left<f16, SK, SM> {
    return subgroupMatrixLoad<subgroup_matrix_left<f16, SK, SM>>(&XH, t * K + k, false, K);
}

fn right(r: u32, k: u32) -> subgroup_matrix_right<f16, SN, SK> {
    return subgroupMatrixLoad<subgroup_matrix_right<f16, SN, SK>>(&WH, r * K + k, true, K);
}
//% endif

@compute @workgroup_size(WG)
//% if EMULATE
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let sid = tid / SGSIZE;
    lane = tid % SGSIZE;
//% else
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_id) sid: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
//% endif
    let row0 = wid.x * TR;
    let tok0 = wid.y * TT;
    let n_tokens = step.n_tokens;
    if (tok0 >= n_tokens) {
        return;
    }
    let tb = (sid / GR) * BT * SM;    // this subgroup's first token in the tile
    let rb = (sid % GR) * BR * SN;    // and first row
    // c<i><j>: tokens tb + i SM .., rows rb + j SN ..; u<i><j>: the same for the up rows (GLU)
//% for v in (["c", "u"] if GLU else ["c"])
//% for i in range(BT)
//% for j in range(BR)
    var {{ v }}{{ i }}{{ j }} = Result();
//% endfor
//% endfor
//% endfor
    for (var k = 0u; k < K; k += SK) {
//% for i in range(BT)
        let a{{ i }} = left(tok0 + tb + {{ i }}u * SM, k);
//% endfor
//% for j in range(BR)
        let b{{ j }} = right(row0 + rb + {{ j }}u * SN, k);
//% endfor
//% for i in range(BT)
//% for j in range(BR)
        c{{ i }}{{ j }} = {{ MMA }}(a{{ i }}, b{{ j }}, c{{ i }}{{ j }});
//% endfor
//% endfor
//% if GLU
//% for j in range(BR)
        let v{{ j }} = right(SP + row0 + rb + {{ j }}u * SN, k);
//% endfor
//% for i in range(BT)
//% for j in range(BR)
        u{{ i }}{{ j }} = {{ MMA }}(a{{ i }}, v{{ j }}, u{{ i }}{{ j }});
//% endfor
//% endfor
//% endif
    }

    // each result matrix (with GLU: and its up one) through the subgroup's part of outs, then into Y by its lanes
//% for i in range(BT)
//% for j in range(BR)
//% for v in (["c", "u"] if GLU else ["c"])
//% if EMULATE
    put_out(sid * PART + {{ loop.index0 }}u * SM * SN, {{ v }}{{ i }}{{ j }});
//% else
    subgroupMatrixStore(&outs, sid * PART + {{ loop.index0 }}u * SM * SN, {{ v }}{{ i }}{{ j }}, false, SN);
//% endif
//% endfor
    workgroupBarrier();
    put_y(tok0 + tb + {{ i }}u * SM, row0 + rb + {{ j }}u * SN, sid * PART, lane, n_tokens);
    workgroupBarrier();
//% endfor
//% endfor
}

// A result matrix at outs[at ..] (with GLU its up matrix after it), tokens t0 .., rows n0 ..: lane l's elements into
// Y (with GLU act(gate) * up).
fn put_y(t0: u32, n0: u32, at: u32, l: u32, n_tokens: u32) {
    for (var e = l; e < SM * SN; e += SGSIZE) {
        let t = t0 + e / SN;
        let n = n0 + e % SN;
        if (t < n_tokens && n < S) {
            var v = outs[at + e];
            if (GLU) {
                v = gate_act(v) * outs[at + SM * SN + e];
            }
            let y = t * YSTRIDE + YOFF + n;
            if (ACCUM) {
                Y[y] += v;
            } else {
                Y[y] = v;
            }
        }
    }
}
