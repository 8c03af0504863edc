// Repack file blocks into the aligned layout (cera_web/quants.py aligned_layout, read by formats/*a.wgsl and their
// int8 forms), a slab of blocks at a time, at upload: for each region r < NR of the type (bytes OR .. OR + ZR of
// every block), the slab's blocks' bytes of that region go, one after another, to the region's place in W:
//   W[region r's first word + first * ZR / 4 + w] = bytes 4w .. 4w + 4 of (block j of the slab, bytes OR ..) in order
// where a region's first word is BLOCKS * (Z0 + .. + Z(r-1)) / 4 (every offset a whole word: ZR is a multiple of 4,
// or 2 with an even first block). A word past the slab's last byte of a region is filled with zeros.
// Constants: B (bytes a block), NR (1 to 3), O0, Z0, O1, Z1, O2, Z2; kernels.repack.
// Bindings:
//   0 S: array<u32>      the slab's blocks as in the file (padded to a word)
//   1 W: array<u32>      the whole buffer in the aligned layout
//   2 P: uniform Slab    {first block of the slab (even), its block count, the buffer's block count BLOCKS}
// Dispatch: spread(repack_groups(fmt, count)) workgroups of 256: one thread an output word.
struct Slab {
    first: u32,
    count: u32,
    blocks: u32,
    unused: u32,
}

@group(0) @binding(0) var<storage, read> S: array<u32>;
@group(0) @binding(1) var<storage, read_write> W: array<u32>;
@group(0) @binding(2) var<uniform> P: Slab;

// Word w of the slab's part of a region (bytes o .. o + z of each block) into W[at + w].
fn put(w: u32, at: u32, o: u32, z: u32) {
    var v = 0u;
    for (var t = 0u; t < 4u; t++) {
        let b = 4u * w + t;
        if (b / z < P.count) {
            let src = (b / z) * B + o + b % z;
            v |= ((S[src / 4u] >> (8u * (src % 4u))) & 0xFFu) << (8u * t);
        }
    }
    W[at + w] = v;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    var k = flat_group(wid, nwg) * 256u + tid;
    let w0 = (P.count * Z0 + 3u) / 4u;
    if (k < w0) {
        put(k, P.first * Z0 / 4u, O0, Z0);
        return;
    }
    k -= w0;
    let w1 = (P.count * Z1 + 3u) / 4u;
    if (NR > 1u && k < w1) {
        put(k, P.blocks * Z0 / 4u + P.first * Z1 / 4u, O1, Z1);
        return;
    }
    k -= w1;
    let w2 = (P.count * Z2 + 3u) / 4u;
    if (NR > 2u && k < w2) {
        put(k, P.blocks * (Z0 + Z1) / 4u + P.first * Z2 / 4u, O2, Z2);
    }
}
