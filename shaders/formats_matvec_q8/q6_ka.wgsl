// Q6_K weights in the aligned layout (q6_ka.wgsl says where each field is) for matvec_q8.wgsl, read as vec4s (WORD):
// item b is 64 weights, (n, p) = ((b % 4) / 2, b % 2) of super-block b / 4: the weights n*128 + k*32 + 16p .. +16
// for k = 0..3. Their bits are three 16-byte loads: ql bytes 64n + 16p (low nibbles: k = 0, high: k = 2), ql bytes
// 64n + 32 + 16p (k = 1, 3) and qh bytes 32n + 16p (bits 2k, 2k+1 of each byte: k's high two bits). Weight
// n*128 + 32k + l has scale sc[8n + 2k + l/16] = sc[8n + 2k + p] (byte 2(k%2) + p of scale word 2n + k/2) and
// activation block 4n + k of the super-block. 6-bit values 0..63 as int8; the -32 is taken off with the input sums:
// d * sum_k dx_k sc_k (q_k · qx_k - 32 sum(qx_k)).
alias WORD = vec4<u32>;           // W is array<vec4<u32>>
const NBK: u32 = K / 256u;
const SC4: u32 = WROWS * NBK * 12u;        // the first scale vec4 (super-block i's at SC4 + i)
const D4W: u32 = SC4 + WROWS * NBK;        // the first d vec4 (super-block i's d: half i % 2 of word i / 2)
const ITEMS: u32 = K / 64u;

// (q - 32) · x over the 16 inputs from qx word w: q the 16 6-bit values of v, one a byte (dot16: formats_matvec_q8/words.wgsl).
fn q6_dot16(v: vec4<u32>, w: u32) -> i32 {
    let s = dot16(v, qx4(w));
    return s.x - 32 * s.y;
}

// The 16 6-bit values of k from ql bits l (nibble k / 2 of each byte) and qh bits h (bits 2k, 2k + 1).
fn q6_values(l: vec4<u32>, h: vec4<u32>, k: u32) -> vec4<u32> {
    return ((l >> vec4<u32>(4u * (k / 2u))) & vec4<u32>(0x0F0F0F0Fu))
         | (((h >> vec4<u32>(2u * k)) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
}

fn item_dot(row: u32, b: u32) -> f32 {
    let sb = b / 4u;
    let n = (b % 4u) / 2u;
    let p = b % 2u;
    let i = row * NBK + sb;
    let l0 = W[12u * i + 4u * n + p];              // ql bytes 64n + 16p: k = 0 (low nibbles), k = 2 (high)
    let l1 = W[12u * i + 4u * n + 2u + p];         // ql bytes 64n + 32 + 16p: k = 1, 3
    let h = W[12u * i + 8u + 2u * n + p];          // qh bytes 32n + 16p
    let sw = W[SC4 + i];
    let s01 = sw[2u * n];                          // sc[8n + p] in byte p, sc[8n + 2 + p] in byte 2 + p
    let s23 = sw[2u * n + 1u];                     // sc[8n + 4 + p], sc[8n + 6 + p]
    let w = sb * 64u + 32u * n + 4u * p;           // qx word of input 256 sb + 128n + 16p (k = 0; k adds 8k)
    let x = sb * 8u + 4u * n;                      // activation block of k = 0 (k adds k)
    let d = unpack2x16float(W[D4W + i / 8u][(i / 2u) % 4u])[i % 2u];
    let acc = xd[x] * f32(signed_byte(s01, p)) * f32(q6_dot16(q6_values(l0, h, 0u), w))
            + xd[x + 1u] * f32(signed_byte(s01, 2u + p)) * f32(q6_dot16(q6_values(l1, h, 1u), w + 8u))
            + xd[x + 2u] * f32(signed_byte(s23, p)) * f32(q6_dot16(q6_values(l0, h, 2u), w + 16u))
            + xd[x + 3u] * f32(signed_byte(s23, 2u + p)) * f32(q6_dot16(q6_values(l1, h, 3u), w + 24u));
    return d * acc;
}
