// Q6_K weights in the aligned layout (q6_ka.wgsl says where each field is) for matvec_q8.wgsl: the items of
// i8_q6_k.wgsl (item b: word column c = b % 8 of super-block b / 8), every word read whole.
alias WORD = u32;                 // W is array<u32>
const NBK: u32 = K / 256u;
const SCW: u32 = WROWS * NBK * 48u;
const DW: u32 = SCW + WROWS * NBK * 4u;
const ITEMS: u32 = K / 32u;

// (q - 32) · qx[w] for the four 6-bit values of the low nibbles of l and bits 0..1 of h's bytes.
fn q6_dot8(l: u32, h: u32, w: u32) -> i32 {
    let x = qx[w];
    return dot4I8Packed((l & 0x0F0F0F0Fu) | ((h & 0x03030303u) << 4u), x) - 32 * dot4I8Packed(0x01010101u, x);
}

// Signed byte i of word w.
fn q6_scale(w: u32, i: u32) -> i32 {
    return bitcast<i32>(w << (24u - 8u * i)) >> 24u;
}

fn item_dot(row: u32, b: u32) -> f32 {
    let c = b % 8u;
    let sb = b / 8u;
    let i = row * NBK + sb;
    let base = 48u * i;
    let pick = c / 4u;
    var acc = 0.0;
    for (var n = 0u; n < 2u; n++) {
        let l0 = W[base + 16u * n + c];                         // k = 0 (low nibbles), 2 (high)
        let l1 = W[base + 16u * n + 8u + c];                    // k = 1, 3
        let h = W[base + 32u + 8u * n + c];                     // bits 2k, 2k+1
        let sa = W[SCW + 4u * i + 2u * n];                      // scales of k = 0, 1
        let sc = W[SCW + 4u * i + 2u * n + 1u];                 // k = 2, 3
        let w = sb * 64u + 32u * n + c;                         // qx word of inputs n*128 + 4c
        let x = sb * 8u + 4u * n;                               // activation block of k = 0
        acc += xd[x] * f32(q6_scale(sa, pick) * q6_dot8(l0, h, w))
             + xd[x + 1u] * f32(q6_scale(sa, 2u + pick) * q6_dot8(l1, h >> 2u, w + 8u))
             + xd[x + 2u] * f32(q6_scale(sc, pick) * q6_dot8(l0 >> 4u, h >> 4u, w + 16u))
             + xd[x + 3u] * f32(q6_scale(sc, 2u + pick) * q6_dot8(l1 >> 4u, h >> 6u, w + 24u));
    }
    return unpack2x16float(W[DW + i / 2u])[i % 2u] * acc;
}
