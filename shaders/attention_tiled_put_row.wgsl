// put_row of the tiled prefill attentions for heads of 64 (attention_tiled.wgsl, attention_tiled64.wgsl), whose
// threads each hold output vec4s c and c + 8 of their rows; included by both.
// Output vec4s c, c + 8 of token t's head h from sums (o0, o1), max m and sum l: normalised into O, or (SPLIT > 1)
// as split z's part, with (m, l) written once a row.
fn put_row(t: u32, h: u32, z: u32, c: u32, o0: vec4<f32>, o1: vec4<f32>, m: f32, l: f32) {
    if (t >= step.n_tokens) {
        return;
    }
    if (SPLIT == 1u) {
        let o = (t * HEADS + h) * D4;
        O[o + c] = o0 / l;
        O[o + c + 8u] = o1 / l;
        return;
    }
    let o = ((z * TMAX + t) * HEADS + h) * D4;
    O[o + c] = o0;
    O[o + c + 8u] = o1;
    if (c == 0u) {
        O[SPLIT * TMAX * HEADS * D4 + (z * TMAX + t) * HEADS + h] = vec4<f32>(m, l, 0.0, 0.0);
    }
}
