// Bandwidth ceiling for cera_web.bench_kernels: read every vec4 of a buffer once and fold it into a value the
// compiler cannot drop (the sum is stored only when it hits a value that random data practically never gives,
// so almost nothing is written).
//
// Constants: N4 (vec4 words to read), THREADS (threads in the whole dispatch).
// Bindings:
//   0 A: array<vec4<u32>>     [N4] the data
//   1 out: array<u32>         [1] written only in the unlikely case above
// Dispatch: THREADS / 256 workgroups of 256 threads, spread over x and y (flat_group); thread i reads vec4s
// i, i + THREADS, i + 2*THREADS, ... so that neighbouring threads read neighbouring 16 bytes.
@group(0) @binding(0) var<storage, read> A: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let first = flat_group(wid, nwg) * 256u + tid;
    var acc = vec4<u32>(0u);
    for (var i = first; i < N4; i += THREADS) {
        acc ^= A[i];
    }
    let v = acc.x ^ acc.y ^ acc.z ^ acc.w;
    if (v == 0x9E3779B9u) {
        out[0] = v;
    }
}
