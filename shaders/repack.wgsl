// Repack file blocks into the aligned layout (cera_web/quants.py aligned_layout, read by formats/q4_1a.wgsl,
// q8_0a.wgsl and their i8_ forms), a slab of blocks at a time, at upload:
//   Q4_1 (Q8 false): block i = I0 + k of the buffer, 20 bytes {d, m: f16; qs: 16 bytes} at S words 5k .. 5k+5
//     -> W[4i .. 4i+4] = qs, W[IW + i] = (d, m), IW = 4 * BLOCKS
//   Q8_0 (Q8 true): blocks i, i + 1 (i = I0 + 2k, I0 even), 68 bytes {d_a, qs_a (32), d_b, qs_b (32)} at S words
//     17k .. 17k+17 -> W[8i .. 8i+16] = qs_a, qs_b (qs_a shifted out of two words each), W[IW + i/2] = (d_a, d_b),
//     IW = 8 * BLOCKS; a slab's odd last block has no partner (its d_b is 0).
// Bindings:
//   0 S: array<u32>      the slab's blocks as in the file (padded to a word)
//   1 W: array<u32>      the whole buffer in the aligned layout
//   2 P: uniform Slab    {first block I0 of the slab, its block count, the buffer's block count BLOCKS}
// Dispatch: spread(repack_groups(fmt, count)) workgroups of 256: one thread a Q4_1 block, a pair of Q8_0 blocks.
struct Slab {
    first: u32,
    count: u32,
    blocks: u32,
    unused: u32,
}

@group(0) @binding(0) var<storage, read> S: array<u32>;
@group(0) @binding(1) var<storage, read_write> W: array<u32>;
@group(0) @binding(2) var<uniform> P: Slab;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let k = flat_group(wid, nwg) * 256u + tid;
    if (!Q8) {
        if (k >= P.count) {
            return;
        }
        let i = P.first + k;
        W[4u * i] = S[5u * k + 1u];
        W[4u * i + 1u] = S[5u * k + 2u];
        W[4u * i + 2u] = S[5u * k + 3u];
        W[4u * i + 3u] = S[5u * k + 4u];
        W[4u * P.blocks + i] = S[5u * k];
        return;
    }
    if (2u * k >= P.count) {
        return;
    }
    let i = P.first + 2u * k;
    let s = 17u * k;
    for (var j = 0u; j < 8u; j++) {               // qs_a: bytes 2 .. 34 of the pair
        W[8u * i + j] = (S[s + j] >> 16u) | (S[s + j + 1u] << 16u);
    }
    var scales = S[s] & 0xFFFFu;
    if (2u * k + 1u < P.count) {
        for (var j = 0u; j < 8u; j++) {           // qs_b: bytes 36 .. 68, word aligned
            W[8u * i + 8u + j] = S[s + 9u + j];
        }
        scales |= S[s + 8u] & 0xFFFF0000u;
    }
    W[8u * P.blocks + i / 2u] = scales;
}
