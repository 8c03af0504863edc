// Q6_K helpers shared by q6_k.wgsl (the file's layout) and q6_ka.wgsl (the aligned one).

// Four 6-bit values minus 32: low nibbles of the bytes of l, bits 0..1 of the bytes of h on top.
fn q6_quad(l: u32, h: u32) -> vec4<f32> {
    let v = (l & 0x0F0F0F0Fu) | ((h & 0x03030303u) << 4u);
    return vec4<f32>(vec4<u32>(v, v >> 8u, v >> 16u, v >> 24u) & vec4<u32>(63u)) - 32.0;
}

// Signed byte i (0..3) of word w, as f32.
fn q6_i8(w: u32, i: u32) -> f32 {
    return f32(bitcast<i32>(w << (24u - 8u * i)) >> 24u);
}
