// Byte-addressed reads from the packed weight array W (array<u32>), for block formats whose blocks are not word
// aligned. Bytes are little-endian, as in the GGUF file.

// The 4 bytes starting at byte offset `off` (any alignment).
fn read_u32(off: u32) -> u32 {
    let w = off >> 2u;
    let s = (off & 3u) * 8u;
    let lo = W[w];
    if (s == 0u) {
        return lo;
    }
    return (lo >> s) | (W[w + 1u] << (32u - s));
}

// The 4 bytes starting at the even byte offset `off`, without read_u32's branch (for blocks whose every field starts
// on a 2-byte boundary: Q5_0, Q3_K, Q6_K).
fn read_u32_even(off: u32) -> u32 {
    let a = off >> 2u;
    let s = (off & 2u) * 8u;           // 0 or 16; written so that the second term vanishes when s = 0
    return (W[a] >> s) | ((W[a + 1u] << 1u) << (31u - s));
}

// The f16 at byte offset `off` (2-byte aligned), as f32.
fn read_f16(off: u32) -> f32 {
    let word = W[off >> 2u];
    return unpack2x16float(select(word, word >> 16u, (off & 2u) != 0u)).x;
}

// Four signed bytes of a word, as floats.
fn unpack_i8x4(q: u32) -> vec4<f32> {
    return vec4<f32>(vec4<i32>(bitcast<i32>(q << 24u), bitcast<i32>(q << 16u),
                               bitcast<i32>(q << 8u), bitcast<i32>(q)) >> vec4<u32>(24u));
}
