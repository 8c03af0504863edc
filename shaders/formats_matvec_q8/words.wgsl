// Word helpers shared by the int8 formats of matvec_q8.wgsl (kernels.INT8_FORMATS / ALIGNED_INT8_FORMATS append this
// file before the format's own): 16 int8 products at once, the quantized input's words, signed scale bytes.

// sum_i q[i] · x[i] and sum_i 1 · x[i] over 4 words of 4 int8.
fn dot16(q: vec4<u32>, x: vec4<u32>) -> vec2<i32> {
    let one = 0x01010101u;
    return vec2<i32>(dot4I8Packed(q.x, x.x) + dot4I8Packed(q.y, x.y) + dot4I8Packed(q.z, x.z) + dot4I8Packed(q.w, x.w),
                     dot4I8Packed(one, x.x) + dot4I8Packed(one, x.y) + dot4I8Packed(one, x.z) + dot4I8Packed(one, x.w));
}

// Words w .. w + 4 of the quantized input (inputs 4w .. 4w + 16).
fn qx4(w: u32) -> vec4<u32> {
    return vec4<u32>(qx[w], qx[w + 1u], qx[w + 2u], qx[w + 3u]);
}

// Signed byte i of word w.
fn signed_byte(w: u32, i: u32) -> i32 {
    return bitcast<i32>(w << (24u - 8u * i)) >> 24u;
}
