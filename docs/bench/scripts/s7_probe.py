"""H200 probe (session 7): where a decode step's time goes.
1. The fixed cost of a dispatch on this stack: a tiny kernel dispatched N times in one pass, each dispatch writing
   the same buffer (dependent: a barrier between each) or its own (independent), 1 and 264 workgroups.
2. For synthetic models (python -m cera_web bench --synthetic writes them first): a decode step's GPU time alone
   (K steps' plans in one submission, host encoding timed apart) against the engine's decode rate.
Prints one JSON object."""
import asyncio
import json
import sys
import time

import numpy as np


async def dispatch_cost(dev):
    from cera_web import kernels
    wgsl = ("@group(0) @binding(0) var<storage, read_write> Y: array<u32>;\n"
            "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { Y[g.x] += 1u; }")
    pipe = dev.pipeline(wgsl, "tiny")
    bufs = [dev.create_buffer(4 * 64 * 1024) for _ in range(64)]
    sink = dev.create_buffer(16)
    groups = [dev.bind(pipe, [b]) for b in bufs]
    out = {}
    for wgs in (1, 264):
        for mode in ("dependent", "independent"):
            def plan(n):
                return dev.record([(pipe, groups[0 if mode == "dependent" else i % 64], (wgs, 1, 1)) for i in range(n)])
            times, gpu = {}, {}
            for n in (0, 2000):
                p = plan(n) if n else dev.record([])
                dev.submit([p]); await dev.read(sink, 0, 4)
                best, best_gpu = 1e9, 1e9
                for _ in range(5):
                    t0 = time.perf_counter()
                    dev.submit([p])
                    t1 = time.perf_counter()
                    await dev.read(sink, 0, 4)
                    t2 = time.perf_counter()
                    best, best_gpu = min(best, t2 - t0), min(best_gpu, t2 - t1)
                times[n], gpu[n] = best, best_gpu
            out[f"{mode}_{wgs}wg_us"] = round((times[2000] - times[0]) / 2000 * 1e6, 3)
            out[f"{mode}_{wgs}wg_gpu_us"] = round((gpu[2000] - gpu[0]) / 2000 * 1e6, 3)   # after the submit returned
    return out


async def step_time(path, K=32):
    from cera_web.engine import Engine
    engine = await Engine.load(path, context_size=2048)
    model, dev = engine.model, engine.dev
    await engine.generate(list(range(100, 116)), max_tokens=4, stop_at_eos=False)
    model.set_step(1, 20, 0)
    plans = [model.plan_decode, model.plan_head_decode] * K
    for _ in range(2):
        dev.submit(plans); await dev.read(model.log, 0, 4)
    enc, tot = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        dev.submit(plans)
        t1 = time.perf_counter()
        await dev.read(model.log, 0, 4)
        t2 = time.perf_counter()
        enc.append(t1 - t0); tot.append(t2 - t0)
    res = await engine.generate(list(range(100, 116)), max_tokens=128, stop_at_eos=False)
    res = await engine.generate(list(range(100, 116)), max_tokens=128, stop_at_eos=False)
    return {"host_encode_ms_per_step": round(min(enc) / K * 1000, 4),
            "gpu_ms_per_step": round((min(t - e for t, e in zip(tot, enc))) / K * 1000, 4),
            "dispatches_per_step": sum(p.size for p in plans) / K,
            "engine_decode_tok_s": round(res.decode_tok_s, 1)}


async def main():
    from cera_web.gpu.native import NativeDevice
    out = {"dispatch": await dispatch_cost(NativeDevice.create())}
    for path in sys.argv[1:]:
        out[path.rsplit("/", 1)[-1]] = await step_time(path)
    print(json.dumps(out))


asyncio.run(main())
