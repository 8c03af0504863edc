// LFM2 short convolution (the ShortConv operator between in_proj and out_proj), for every token of a pass, in order:
//   from the in_proj output row of token t, split into three H-wide parts  b = BCX[t, 0:H], c = BCX[t, H:2H],
//   x = BCX[t, 2H:3H]:
//     bx[ch]  = b[ch] * x[ch]
//     out[ch] = sum_{k < D} S[k, ch] * W[ch, k] + bx[ch] * W[ch, D]        (D = L - 1 state slots)
//     Y[t, ch] = c[ch] * out[ch]
//   then the rolling state shifts left by one slot and bx is appended:  S[k] <- S[k + 1],  S[D - 1] <- bx.
// This is the causal depthwise Conv1d of kernel size L over the sequence of bx values (S holds the D most recent
// ones, oldest first). Each thread owns one channel and walks the pass's tokens in order, so a prefill chunk of T
// tokens sees the earlier tokens of the chunk and leaves S exactly as T single-token decode steps would.
// A fresh sequence starts from S = 0 (the model clears it when a pass starts at position 0).
//
// Constants: H (channels = hidden size), L (kernel size = shortconv.l_cache, 2 <= L <= 16).
// Bindings:
//   0 BCX: array<f32>    [n_tokens, 3 * H]   in_proj output (B | C | x per token)
//   1 W:   array<f32>    [H, L]              depthwise taps (GGUF shortconv.conv.weight, shape (L, H))
//   2 S:   array<f32>    [L - 1, H]          rolling state of this layer (read and written)
//   3 Y:   array<f32>    [n_tokens, H]       C * conv, the input of out_proj
//   4 step: uniform Step
// Dispatch: (ceil(H / 64), 1, 1) workgroups of 64 threads, one channel per thread.
@group(0) @binding(0) var<storage, read> BCX: array<f32>;
@group(0) @binding(1) var<storage, read> W: array<f32>;
@group(0) @binding(2) var<storage, read_write> S: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
@group(0) @binding(4) var<uniform> step: Step;

const D: u32 = L - 1u;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let ch = gid.x;
    if (ch >= H) {
        return;
    }
    var w: array<f32, L>;
    for (var k = 0u; k < L; k++) {
        w[k] = W[ch * L + k];
    }
    var win: array<f32, D>;                 // the state of this channel, oldest first
    for (var k = 0u; k < D; k++) {
        win[k] = S[k * H + ch];
    }
    for (var t = 0u; t < step.n_tokens; t++) {
        let row = t * 3u * H;
        let bx = BCX[row + ch] * BCX[row + 2u * H + ch];
        var acc = bx * w[D];
        for (var k = 0u; k < D; k++) {
            acc += win[k] * w[k];
        }
        Y[t * H + ch] = BCX[row + H + ch] * acc;
        for (var k = 0u; k + 1u < D; k++) {
            win[k] = win[k + 1u];
        }
        win[D - 1u] = bx;
    }
    for (var k = 0u; k < D; k++) {
        S[k * H + ch] = win[k];
    }
}
