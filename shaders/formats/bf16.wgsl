// BF16 weights: row-major [N rows][K bfloat16] (K even, so rows are whole words). A bfloat16 is the top half of
// an f32: shifting it into the high 16 bits and bitcasting decodes it exactly (no shader-f16 needed).
// Provides w8(row, oct): weights row[8*oct .. 8*oct+8].
const ROW_WORDS: u32 = K / 2u;

// The two bfloat16 of a word (low half first) as f32.
fn bf16x2(w: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xFFFF0000u));
}

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let b = row * ROW_WORDS + oct * 4u;
    return array<vec4<f32>, 2>(vec4<f32>(bf16x2(W[b]), bf16x2(W[b + 1u])),
                               vec4<f32>(bf16x2(W[b + 2u]), bf16x2(W[b + 3u])));
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Dot product of weights row[BLOCK*b .. BLOCK*(b+1)] with xin(x .. x + BLOCK/4) (vec4 index).
const BLOCK: u32 = 8u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let w = w8(row, b);
    return dot(w[0], xin(x)) + dot(w[1], xin(x + 1u));
}
