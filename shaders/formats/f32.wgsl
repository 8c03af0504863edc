// F32 weights: row-major [N rows][K floats], read as u32 words and bitcast.
// Provides w8(row, oct): the 8 consecutive weights row[8*oct .. 8*oct+8].
const ROW_WORDS: u32 = K;

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let b = row * ROW_WORDS + oct * 8u;
    return array<vec4<f32>, 2>(
        vec4<f32>(bitcast<f32>(W[b]), bitcast<f32>(W[b + 1u]), bitcast<f32>(W[b + 2u]), bitcast<f32>(W[b + 3u])),
        vec4<f32>(bitcast<f32>(W[b + 4u]), bitcast<f32>(W[b + 5u]), bitcast<f32>(W[b + 6u]), bitcast<f32>(W[b + 7u])));
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Dot product of weights row[BLOCK*b .. BLOCK*(b+1)] with X[x .. x + BLOCK/4] (vec4 index).
const BLOCK: u32 = 8u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let w = w8(row, b);
    return dot(w[0], xin(x)) + dot(w[1], xin(x + 1u));
}
