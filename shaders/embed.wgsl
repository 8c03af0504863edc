// Embedding lookup: Y[t, :] = SCALE * row tokens[t] of the (packed) embedding table, dequantized to f32, for
// t < step.n_tokens (SCALE is 1, or sqrt(K) for Gemma).
// The weight format file provides w8(row, oct).
// A table too big for one binding is split into row ranges, one buffer and one dispatch each (models/base.py
// pieces): this dispatch serves the ids in ROW0 .. ROW0 + N. The range starting at row 0 writes every token (a zero
// row for ids outside it, so ids >= VOCAB give zeros); later ranges overwrite the tokens whose ids they hold.
//
// Constants: K (embedding width), N (rows in this buffer), ROW0 (the first one's id), VOCAB (rows in the table),
//   SCALE (f32).
// Bindings:
//   0 W: array<u32>              packed embedding rows ROW0 .. ROW0 + N, [N, K]
//   1 tokens: array<u32>         [n_tokens] token ids
//   2 Y: array<vec4<f32>>        [n_tokens, K]
//   3 step: uniform Step
// Dispatch: (ceil(K / 8 / 64), n_tokens_max): one thread per group of 8 weights of one token.
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> step: Step;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let oct = gid.x;
    let t = gid.y;
    if (oct >= K / 8u || t >= step.n_tokens) {
        return;
    }
    let id = tokens[t];
    let mine = id >= ROW0 && id - ROW0 < N;
    if (!mine && ROW0 != 0u) {
        return;
    }
    var w = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    if (mine) {
        w = w8(id - ROW0, oct);
        w[0] *= SCALE;
        w[1] *= SCALE;
    }
    let y = (t * K) / 4u + oct * 2u;
    Y[y] = w[0];
    Y[y + 1u] = w[1];
}
