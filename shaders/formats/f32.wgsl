// F32 weights: row-major [N rows][K floats], read as u32 words and bitcast.
// Provides w8(row, oct): the 8 consecutive weights row[8*oct .. 8*oct+8].
const ROW_WORDS: u32 = K;

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let b = row * ROW_WORDS + oct * 8u;
    return array<vec4<f32>, 2>(
        vec4<f32>(bitcast<f32>(W[b]), bitcast<f32>(W[b + 1u]), bitcast<f32>(W[b + 2u]), bitcast<f32>(W[b + 3u])),
        vec4<f32>(bitcast<f32>(W[b + 4u]), bitcast<f32>(W[b + 5u]), bitcast<f32>(W[b + 6u]), bitcast<f32>(W[b + 7u])));
}
