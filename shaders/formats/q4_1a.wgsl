// Q4_1 weights in the aligned layout (cera_web/quants.py aligned_layout, made at upload by repack.wgsl): the buffer holds
// WROWS rows of K/32 blocks; block i = row * K/32 + j has its 16 integer bytes (q_j low nibbles for j < 16, high
// nibbles for j - 16, as in the file) at words 4i .. 4i+4 and its (d: f16, m: f16) word at IW + i, after every
// block's integers. Weight j is d * q_j + m. Provides w8(row, oct): weights row[8*oct .. 8*oct+8].
const NBR: u32 = K / 32u;
const IW: u32 = WROWS * (K / 8u);

fn w8(row: u32, oct: u32) -> array<vec4<f32>, 2> {
    let i = row * NBR + oct / 4u;
    let o = oct % 4u;
    let dm = unpack2x16float(W[IW + i]);
    let shift = (o / 2u) * 4u;                    // octets 0,1: low nibbles; 2,3: high nibbles
    let q0 = W[4u * i + (o % 2u) * 2u] >> shift;
    let q1 = W[4u * i + (o % 2u) * 2u + 1u] >> shift;
    let a = vec4<f32>(vec4<u32>(q0, q0 >> 8u, q0 >> 16u, q0 >> 24u) & vec4<u32>(15u));
    let b = vec4<f32>(vec4<u32>(q1, q1 >> 8u, q1 >> 16u, q1 >> 24u) & vec4<u32>(15u));
    return array<vec4<f32>, 2>(a * dm.x + dm.y, b * dm.x + dm.y);
}

// --- matmul only (kernels.build drops what follows when a kernel does not bind X) ---
// Items of BLOCK = 8 weights, interleaved as in q4_1.wgsl: item b is integer word c = b % 4 of block b / 4 (weights
// 4c .. 4c+4 and 16+4c .. 16+4c+4); x is the vec4 index item b would have if items were contiguous.
const BLOCK: u32 = 8u;

fn block_dot(row: u32, b: u32, x: u32) -> f32 {
    let c = b % 4u;
    let i = row * NBR + b / 4u;
    let dm = unpack2x16float(W[IW + i]);
    let q = W[4u * i + c];
    let lo = vec4<f32>(vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) & vec4<u32>(15u));
    let hi = vec4<f32>(vec4<u32>(q >> 4u, q >> 12u, q >> 20u, q >> 28u) & vec4<u32>(15u));
    let xl = xin(x - c);
    let xh = xin(x + 4u - c);
    return dm.x * (dot(lo, xl) + dot(hi, xh)) + dm.y * dot(xl + xh, vec4<f32>(1.0));
}
