// Rotary position embedding, in place, on rows that hold HEADS heads of HD values each:
//   for token t (position p = step.pos0 + t) and pair i < HD/2 with angle a = p * FREQ[i]:
//   NEOX false (GGUF llama layout): the pair is (x[2i], x[2i+1]);  NEOX true: (x[i], x[i + HD/2]);
//   (x0, x1) <- (x0 cos a - x1 sin a, x0 sin a + x1 cos a).
// FREQ[i] = THETA^(-2i/HD) / (rope scaling factor), computed on the host (it carries Llama-3 rope_freqs factors).
//
// Constants: HEADS, HD (head size), NEOX (bool), AT_POS (rows are absolute positions: row = step.pos0 + t, for K
//   written straight into the cache; otherwise row = t).
// Bindings:
//   0 X: array<f32>       [rows, HEADS * HD]
//   1 FREQ: array<f32>    [HD / 2]
//   2 step: uniform Step
// Dispatch: (ceil(HEADS * HD / 2 / 64), n_tokens_max): one thread per rotated pair.
@group(0) @binding(0) var<storage, read_write> X: array<f32>;
@group(0) @binding(1) var<storage, read> FREQ: array<f32>;
@group(0) @binding(2) var<uniform> step: Step;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let half = HD / 2u;
    let t = gid.y;
    if (gid.x >= HEADS * half || t >= step.n_tokens) {
        return;
    }
    let head = gid.x / half;
    let i = gid.x % half;
    let pos = step.pos0 + t;
    var row = t;
    if (AT_POS) { row = pos; }
    let base = row * HEADS * HD + head * HD;
    var i0 = base + 2u * i;
    var i1 = i0 + 1u;
    if (NEOX) {
        i0 = base + i;
        i1 = base + i + half;
    }
    let a = f32(pos) * FREQ[i];
    let c = cos(a);
    let s = sin(a);
    let x0 = X[i0];
    let x1 = X[i1];
    X[i0] = x0 * c - x1 * s;
    X[i1] = x0 * s + x1 * c;
}
