// EXPERIMENT: Q8_0 split layout: WROWS*K/32 f16 scales (2 a word, padded to vec4), then two vec4 of int8 a block.
alias WORD = vec4<u32>;
const NBR: u32 = K / 32u;
const QOFF: u32 = (WROWS * NBR + 7u) / 8u;
const ITEMS: u32 = NBR;

fn item_dot(row: u32, b: u32) -> f32 {
    let i = row * NBR + b;
    let h = i / 2u;
    let d = unpack2x16float(W[h / 4u][h % 4u])[i % 2u];
    let q0 = W[QOFF + 2u * i];
    let q1 = W[QOFF + 2u * i + 1u];
    let x = b * 8u;
    let s = dot4I8Packed(q0.x, qx[x]) + dot4I8Packed(q0.y, qx[x + 1u])
          + dot4I8Packed(q0.z, qx[x + 2u]) + dot4I8Packed(q0.w, qx[x + 3u])
          + dot4I8Packed(q1.x, qx[x + 4u]) + dot4I8Packed(q1.y, qx[x + 5u])
          + dot4I8Packed(q1.z, qx[x + 6u]) + dot4I8Packed(q1.w, qx[x + 7u]);
    return d * xd[b] * f32(s);
}
