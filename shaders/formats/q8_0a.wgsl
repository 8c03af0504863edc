// Q8_0 weights in the aligned layout (cera_web/quants.py aligned_layout, made at upload by repack.wgsl): the buffer holds
// WROWS rows of K/32 blocks; block i = row * K/32 + j has its 32 int8 at words 8i .. 8i+8 and its f16 scale d in
// half i % 2 of word IW + i / 2, after every block's integers. Weight j is d * qs[j]. Provides w8(row, oct):
// weights row[8*oct .. 8*oct+8]. Needs bytes.wgsl (unpack_i8x4).
const NBR: u32 = K / 32u;
const IW: u32 = WROWS * (K / 4u);

fn q8_scale(i: u32) -> f32 {
    return unpack2x16float(W[IW + i / 2u])[i % 2u];
}

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let i = row * NBR + oct / 4u;
    let d = q8_scale(i);
    let w = 8u * i + (oct % 4u) * 2u;
    return array<vec4<f32>, 2>(unpack_i8x4(W[w]) * d, unpack_i8x4(W[w + 1u]) * d);
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Items of BLOCK = 8 consecutive weights: item b is weights 8c .. 8c+8 (c = b % 4) of block b / 4, so neighbouring
// lanes read neighbouring words of W. d * sum_j qs_j x_j.
const BLOCK: u32 = 8u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let i = row * NBR + b / 4u;
    let w = 8u * i + (b % 4u) * 2u;
    return q8_scale(i) * (dot(unpack_i8x4(W[w]), xin(x)) + dot(unpack_i8x4(W[w + 1u]), xin(x + 1u)));
}
