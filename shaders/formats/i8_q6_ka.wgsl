// Q6_K weights in the aligned layout (q6_ka.wgsl says where each field is) for matvec_q8.wgsl: the items of
// i8_q6_k.wgsl (item b: word column c = b % 8 of super-block b / 8; the product is i8_q6.wgsl's q6_half), every
// word read whole.
alias WORD = u32;                 // W is array<u32>
const NBK: u32 = K / 256u;
const SCW: u32 = WROWS * NBK * 48u;
const DW: u32 = SCW + WROWS * NBK * 4u;
const ITEMS: u32 = K / 32u;

fn item_dot(row: u32, b: u32) -> f32 {
    let c = b % 8u;
    let sb = b / 8u;
    let i = row * NBK + sb;
    var acc = 0.0;
    for (var n = 0u; n < 2u; n++) {
        acc += q6_half(W[48u * i + 16u * n + c], W[48u * i + 16u * n + 8u + c], W[48u * i + 32u + 8u * n + c],
                       W[SCW + 4u * i + 2u * n], W[SCW + 4u * i + 2u * n + 1u], sb, n, c);
    }
    return unpack2x16float(W[DW + i / 2u])[i % 2u] * acc;
}
