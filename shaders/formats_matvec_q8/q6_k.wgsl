// Q6_K weights for matvec_q8.wgsl (layout in q6_k.wgsl: super-blocks of 256 weights in 210 bytes: ql low 4 bits,
// qh high 2 bits, 16 int8 scales, d; weight n*128 + k*32 + l is d * sc[n*8 + 2k + l/16] * (q - 32)). Item b is
// word column c = b % 8 of super-block b / 8, as in q6_k.wgsl: for n < 2 and k < 4 the weights
// n*128 + k*32 + 4c .. +4, whose 16-weight scale is sc[n*8 + 2k + c/4] and whose activation block is 4n + k.
// The product is formats_matvec_q8/q6.wgsl's q6_half. Super-blocks start on 2-byte boundaries: read_u32_even (bytes.wgsl).
alias WORD = u32;                 // W is array<u32>
const ROW_BYTES: u32 = K / 256u * 210u;
const ITEMS: u32 = K / 32u;

fn item_dot(row: u32, b: u32) -> f32 {
    let c = b % 8u;
    let sb = b / 8u;
    let base = row * ROW_BYTES + sb * 210u;
    var acc = 0.0;
    for (var n = 0u; n < 2u; n++) {
        acc += q6_half(read_u32_even(base + 64u * n + 4u * c), read_u32_even(base + 64u * n + 32u + 4u * c),
                       read_u32_even(base + 128u + 32u * n + 4u * c), read_u32_even(base + 192u + 8u * n),
                       read_u32_even(base + 196u + 8u * n), sb, n, c);
    }
    return unpack2x16float(read_u32_even(base + 208u)).x * acc;
}
