// EXPERIMENT: Q4_1 split layout: WROWS*K/32 words {d, m} (padded to vec4), then one vec4 of nibbles a block.
alias WORD = vec4<u32>;
const NBR: u32 = K / 32u;
const QOFF: u32 = (WROWS * NBR + 3u) / 4u;
const ITEMS: u32 = NBR;
const NIB: vec4<u32> = vec4<u32>(0x0F0F0F0Fu);

fn item_dot(row: u32, b: u32) -> f32 {
    let i = row * NBR + b;
    let dm = unpack2x16float(W[i / 4u][i % 4u]);
    let q = W[QOFF + i];
    let lo = q & NIB;
    let hi = (q >> vec4<u32>(4u)) & NIB;
    let x = b * 8u;
    let s = dot4I8Packed(lo.x, qx[x]) + dot4I8Packed(lo.y, qx[x + 1u])
          + dot4I8Packed(lo.z, qx[x + 2u]) + dot4I8Packed(lo.w, qx[x + 3u])
          + dot4I8Packed(hi.x, qx[x + 4u]) + dot4I8Packed(hi.y, qx[x + 5u])
          + dot4I8Packed(hi.z, qx[x + 6u]) + dot4I8Packed(hi.w, qx[x + 7u]);
    return xd[b] * dm.x * f32(s) + dm.y * xs[b];
}
