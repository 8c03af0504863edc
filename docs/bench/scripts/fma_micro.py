"""FMA throughput of the adapter through WGSL: float32 vec4 against float16 vec4 / vec2 (shader-f16), each thread
running independent multiply-add chains in registers. Tells whether f16 arithmetic doubles the rate (packed half
FMAs) on this GPU through naga. python docs/bench/scripts/fma_micro.py -> one JSON line."""
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from cera_web.gpu.native import NativeDevice  # noqa: E402

KERNEL = """
{enable}
alias T = {vec};
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let s = {scalar}(f32(gid.x & 7u) * 0.001);
    var a0 = T(s); var a1 = T(s + {scalar}(0.1)); var a2 = T(s + {scalar}(0.2)); var a3 = T(s + {scalar}(0.3));
    var a4 = T(s + {scalar}(0.4)); var a5 = T(s + {scalar}(0.5)); var a6 = T(s + {scalar}(0.6)); var a7 = T(s + {scalar}(0.7));
    let m = T({scalar}(0.999));
    let c = T({scalar}(0.0001));
    for (var i = 0u; i < {iters}u; i++) {{
        a0 = fma(a0, m, c); a1 = fma(a1, m, c); a2 = fma(a2, m, c); a3 = fma(a3, m, c);
        a4 = fma(a4, m, c); a5 = fma(a5, m, c); a6 = fma(a6, m, c); a7 = fma(a7, m, c);
    }}
    let r = (a0 + a1) + (a2 + a3) + (a4 + a5) + (a6 + a7);
    out[gid.x] = f32(r.x) + f32(r.y){more};
}}
"""


# int8 dot products (WGSL dot4I8Packed): 8 independent i32 accumulators a thread, each += the dot of its own packed
# word with a word that changes every iteration; 4 multiply-adds a dot ("tops" counts 2 ops a multiply-add)
KERNEL_I8 = """
requires packed_4x8_integer_dot_product;
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let w0 = gid.x * 2654435761u; let w1 = w0 ^ 0x5A5A5A5Au; let w2 = w0 ^ 0x33333333u; let w3 = w0 ^ 0x0F0F0F0Fu;
    let w4 = w0 + 0x01010101u; let w5 = w1 + 0x01010101u; let w6 = w2 + 0x01010101u; let w7 = w3 + 0x01010101u;
    var a0 = 0; var a1 = 0; var a2 = 0; var a3 = 0; var a4 = 0; var a5 = 0; var a6 = 0; var a7 = 0;
    var b = gid.x;
    for (var i = 0u; i < {iters}u; i++) {{
        a0 += dot4I8Packed(w0, b); a1 += dot4I8Packed(w1, b); a2 += dot4I8Packed(w2, b); a3 += dot4I8Packed(w3, b);
        a4 += dot4I8Packed(w4, b); a5 += dot4I8Packed(w5, b); a6 += dot4I8Packed(w6, b); a7 += dot4I8Packed(w7, b);
        b += 0x01030507u;
    }}
    out[gid.x] = f32((a0 + a1) + (a2 + a3) + (a4 + a5) + (a6 + a7));
}}
"""


async def main():
    dev = NativeDevice.create()
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    groups = 132 * 64
    out = dev.create_buffer(4 * 256 * groups)
    res = {"device": dev.name, "features": sorted(dev.features)}
    kinds = [("f32x4", "", "vec4<f32>", "f32", 4, " + r.z + r.w")]
    if "shader-f16" in dev.features:
        kinds += [("f16x4", "enable f16;", "vec4<f16>", "f16", 4, " + f32(r.z) + f32(r.w)"),
                  ("f16x2", "enable f16;", "vec2<f16>", "f16", 2, "")]
    for name, enable, vec, scalar, width, more in kinds:
        pipe = dev.pipeline(KERNEL.format(enable=enable, vec=vec, scalar=scalar, iters=iters, more=more), name)
        plan = dev.record([(pipe, dev.bind(pipe, [out]), (groups, 1, 1))])
        dev.submit([plan]); await dev.read(out, 0, 4)
        times = []
        for _ in range(5):
            t0 = time.perf_counter(); dev.submit([plan]); await dev.read(out, 0, 4)
            times.append(time.perf_counter() - t0)
        t = min(times)
        flops = 2 * 8 * width * iters * 256 * groups
        res[name] = {"ms": round(t * 1e3, 3), "tflops": round(flops / t / 1e12, 2)}
    if dev.int8_dot:
        pipe = dev.pipeline(KERNEL_I8.format(iters=iters), "i8")
        plan = dev.record([(pipe, dev.bind(pipe, [out]), (groups, 1, 1))])
        dev.submit([plan]); await dev.read(out, 0, 4)
        times = []
        for _ in range(5):
            t0 = time.perf_counter(); dev.submit([plan]); await dev.read(out, 0, 4)
            times.append(time.perf_counter() - t0)
        t = min(times)
        res["i8dot"] = {"ms": round(t * 1e3, 3), "tops": round(2 * 8 * 4 * iters * 256 * groups / t / 1e12, 2)}
    print(json.dumps(res))


asyncio.run(main())
