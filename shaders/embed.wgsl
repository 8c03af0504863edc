// Embedding lookup: Y[t, :] = row tokens[t] of the (packed) embedding table, dequantized to f32, t < step.n_tokens.
// The weight format file provides w8(row, oct).
//
// Constants: K (embedding width), N (vocabulary size; ids >= N give a zero row).
// Bindings:
//   0 W: array<u32>              packed embedding table [N, K]
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
    var w = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    if (id < N) {
        w = w8(id, oct);
    }
    let y = (t * K) / 4u + oct * 2u;
    Y[y] = w[0];
    Y[y + 1u] = w[1];
}
