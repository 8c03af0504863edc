// Q6_K weights for matvec_q8.wgsl (layout in q6_k.wgsl: super-blocks of 256 weights in 210 bytes: ql low 4 bits,
// qh high 2 bits, 16 int8 scales, d; weight n*128 + k*32 + l is d * sc[n*8 + 2k + l/16] * (q - 32)). Item b is
// word column c = b % 8 of super-block b / 8, as in q6_k.wgsl: for n < 2 and k < 4 the weights
// n*128 + k*32 + 4c .. +4, whose 16-weight scale is sc[n*8 + 2k + c/4] and whose activation block is 4n + k.
// 6-bit values 0..63 as int8; the -32 offset is taken off with the inputs' sum. Super-blocks start on 2-byte
// boundaries: read_u32_even (bytes.wgsl).
alias WORD = u32;                 // W is array<u32>
const ROW_BYTES: u32 = K / 256u * 210u;
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
    let base = row * ROW_BYTES + sb * 210u;
    let pick = c / 4u;
    var acc = 0.0;
    for (var n = 0u; n < 2u; n++) {
        let l0 = read_u32_even(base + 64u * n + 4u * c);          // k = 0 (low nibbles), 2 (high)
        let l1 = read_u32_even(base + 64u * n + 32u + 4u * c);    // k = 1, 3
        let h = read_u32_even(base + 128u + 32u * n + 4u * c);    // bits 2k, 2k+1
        let sa = read_u32_even(base + 192u + 8u * n);             // scales of k = 0, 1
        let sc = read_u32_even(base + 196u + 8u * n);             // k = 2, 3
        let w = sb * 64u + 32u * n + c;                           // qx word of inputs n*128 + 4c
        let x = sb * 8u + 4u * n;                                 // activation block of k = 0
        acc += xd[x] * f32(q6_scale(sa, pick) * q6_dot8(l0, h, w))
             + xd[x + 1u] * f32(q6_scale(sa, 2u + pick) * q6_dot8(l1, h >> 2u, w + 8u))
             + xd[x + 2u] * f32(q6_scale(sc, pick) * q6_dot8(l0 >> 4u, h >> 4u, w + 16u))
             + xd[x + 3u] * f32(q6_scale(sc, 2u + pick) * q6_dot8(l1 >> 4u, h >> 6u, w + 24u));
    }
    return unpack2x16float(read_u32_even(base + 208u)).x * acc;
}
