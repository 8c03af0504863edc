// F16 weights: row-major [N rows][K halves] (K even, so rows are whole words); decoded with unpack2x16float
// (no shader-f16 needed). Provides w8(row, oct): weights row[8*oct .. 8*oct+8].
const ROW_WORDS: u32 = K / 2u;

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let b = row * ROW_WORDS + oct * 4u;
    let a0 = unpack2x16float(W[b]);
    let a1 = unpack2x16float(W[b + 1u]);
    let a2 = unpack2x16float(W[b + 2u]);
    let a3 = unpack2x16float(W[b + 3u]);
    return array<vec4<f32>, 2>(vec4<f32>(a0, a1), vec4<f32>(a2, a3));
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Dot product of weights row[BLOCK*b .. BLOCK*(b+1)] with X[x .. x + BLOCK/4] (vec4 index).
const BLOCK: u32 = 8u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let w = w8(row, b);
    return dot(w[0], xin(x)) + dot(w[1], xin(x + 1u));
}
