// The gate activation of a gated feed-forward, shared by matmul, matmul_tiled and swiglu (kernels.build appends this
// file to kernels that call gate_act). Constant GELU (bool): false gives SiLU (SwiGLU: g / (1 + exp(-g))), true
// GELU's tanh approximation (GeGLU, Gemma): 0.5 g (1 + tanh(u)) = g / (1 + exp(-2u)), u = sqrt(2/pi) (g + 0.044715 g^3),
// written with exp so that large |u| saturates instead of overflowing tanh.
fn gate_act(g: f32) -> f32 {
    if (GELU) {
        return g / (1.0 + exp(-1.5957691216057308 * (g + 0.044715 * g * g * g)));
    }
    return g / (1.0 + exp(-g));
}
