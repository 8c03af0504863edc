// Gated activation: H[t, i] = act(G[t, i]) * U[t, i], for t < step.n_tokens; act is SiLU (SwiGLU), or with GELU
// the tanh-approximated GELU (GeGLU): gate_act.wgsl.
//
// Constants: F (feed-forward width), GELU (bool).
// Bindings:
//   0 G: array<f32>   [n_tokens, F] gate projection
//   1 U: array<f32>   [n_tokens, F] up projection
//   2 H: array<f32>   [n_tokens, F] result
//   3 step: uniform Step
// Dispatch: (ceil(F / 64), n_tokens_max).
@group(0) @binding(0) var<storage, read> G: array<f32>;
@group(0) @binding(1) var<storage, read> U: array<f32>;
@group(0) @binding(2) var<storage, read_write> H: array<f32>;
@group(0) @binding(3) var<uniform> step: Step;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let t = gid.y;
    if (i >= F || t >= step.n_tokens) {
        return;
    }
    let g = G[t * F + i];
    H[t * F + i] = gate_act(g) * U[t * F + i];
}
