// Shared by every kernel (prepended by cera_web/kernels.py after the kernel's compile-time constants).
//
// Step: the per-step values, one small uniform buffer written once per forward pass.
//   n_tokens  tokens in this pass (1 when decoding, up to the chunk size when prefilling)
//   pos0      position of the first of them in the sequence
//   out_index where the sampler records this pass's token in the token log
//   seq_len   pos0 + n_tokens
struct Step {
    n_tokens: u32,
    pos0: u32,
    out_index: u32,
    seq_len: u32,
}

// Workgroup index of a dispatch spread over x and y (x is capped at 65535 groups).
fn flat_group(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}
