// Q8_0 weights in the aligned layout (q8_0a.wgsl says where each field is) for matvec_q8.wgsl: W is read as
// array<vec4<u32>>, so a block's 32 int8 are two 16-byte loads. Item b is block b of the row (32 weights).
alias WORD = vec4<u32>;           // W is array<vec4<u32>>
const NBR: u32 = K / 32u;
const IW4: u32 = WROWS * (K / 16u);    // the first scale word (word WROWS K / 4), in vec4s
const ITEMS: u32 = K / 32u;

fn item_dot(row: u32, b: u32) -> f32 {
    let i = row * NBR + b;
    let q0 = W[2u * i];
    let q1 = W[2u * i + 1u];
    let h = i / 2u;                                  // its scale word, counted from the first
    let d = unpack2x16float(W[IW4 + h / 4u][h % 4u])[i % 2u];
    let x = b * 8u;
    let s = dot4I8Packed(q0.x, qx[x]) + dot4I8Packed(q0.y, qx[x + 1u])
          + dot4I8Packed(q0.z, qx[x + 2u]) + dot4I8Packed(q0.w, qx[x + 3u])
          + dot4I8Packed(q1.x, qx[x + 4u]) + dot4I8Packed(q1.y, qx[x + 5u])
          + dot4I8Packed(q1.z, qx[x + 6u]) + dot4I8Packed(q1.w, qx[x + 7u]);
    return d * xd[b] * f32(s);
}
