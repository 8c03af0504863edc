// Q4_1 weights in the aligned layout (q4_1a.wgsl says where each field is) for matvec_q8.wgsl: W is read as
// array<vec4<u32>>, so a block's 16 integer bytes are one 16-byte load. Item b is block b of the row (32 weights):
// its low nibbles (weights 0 .. 16) pair with input words 8b .. 8b+4, its high nibbles with 8b+4 .. 8b+8.
// sum_j (d q_j + m) x_j = dx * (d * sum_j q_j qx_j + m * sum_j qx_j), nibbles 0..15 as int8.
alias WORD = vec4<u32>;           // W is array<vec4<u32>>
const NBR: u32 = K / 32u;
const IW4: u32 = WROWS * (K / 32u);    // the first scale word, in vec4s
const ITEMS: u32 = K / 32u;

fn item_dot(row: u32, b: u32) -> f32 {
    let i = row * NBR + b;
    let q = W[i];
    let dm = unpack2x16float(W[IW4 + i / 4u][i % 4u]);
    let lo = q & vec4<u32>(0x0F0F0F0Fu);
    let hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu);
    let x = b * 8u;
    let s = dot4I8Packed(lo.x, qx[x]) + dot4I8Packed(lo.y, qx[x + 1u])
          + dot4I8Packed(lo.z, qx[x + 2u]) + dot4I8Packed(lo.w, qx[x + 3u])
          + dot4I8Packed(hi.x, qx[x + 4u]) + dot4I8Packed(hi.y, qx[x + 5u])
          + dot4I8Packed(hi.z, qx[x + 6u]) + dot4I8Packed(hi.w, qx[x + 7u]);
    let sx = dot4I8Packed(0x01010101u, qx[x]) + dot4I8Packed(0x01010101u, qx[x + 1u])
           + dot4I8Packed(0x01010101u, qx[x + 2u]) + dot4I8Packed(0x01010101u, qx[x + 3u])
           + dot4I8Packed(0x01010101u, qx[x + 4u]) + dot4I8Packed(0x01010101u, qx[x + 5u])
           + dot4I8Packed(0x01010101u, qx[x + 6u]) + dot4I8Packed(0x01010101u, qx[x + 7u]);
    return xd[b] * (dm.x * f32(s) + dm.y * f32(sx));
}
