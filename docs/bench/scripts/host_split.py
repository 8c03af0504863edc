"""Host time of one decode step split into encoding (Python + wgpu-native pass recording) and queue.submit, on a
synthetic model: python docs/bench/scripts/host_split.py [SHAPE]. Prints one JSON line."""
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from cera_web import bench  # noqa: E402
from cera_web.engine import Engine  # noqa: E402


async def main(shape):
    path = Path(tempfile.gettempdir()) / f"host-split-{shape}.gguf"
    if not path.exists():
        bench.synthetic_llama(path, shape)
    eng = await Engine.load(str(path))
    m, dev = eng.model, eng.dev
    await eng.generate([1, 2, 3], max_tokens=2)
    queue, spent = dev.device.queue, [0.0, 0.0]
    orig_submit, orig_write = queue.submit, queue.write_buffer

    def submit(x):
        t = time.perf_counter(); orig_submit(x); spent[0] += time.perf_counter() - t

    def write(*a):
        t = time.perf_counter(); orig_write(*a); spent[1] += time.perf_counter() - t
    queue.submit, queue.write_buffer = submit, write
    out = {"shape": shape, "dispatches_per_step": m.plan_decode.size + m.plan_head_decode.size}
    for n in (8, 32):
        spent[:] = [0.0, 0.0]
        t0 = time.perf_counter()
        for i in range(n):
            m.decode(10 + i, i % 32)
        host = (time.perf_counter() - t0) / n * 1000
        await m.read_log(1)
        out[f"steps{n}"] = {"host_ms_per_step": round(host, 4), "queue_submit_ms": round(spent[0] / n * 1000, 4),
                            "write_buffer_ms": round(spent[1] / n * 1000, 4),
                            "encode_ms": round(host - (spent[0] + spent[1]) / n * 1000, 4)}
    # the same pass recorded by hand, timing the dispatch calls, end() and finish() apart
    from cera_web.gpu.native import _raw
    lib, null = _raw.libf, _raw.ffi.NULL
    raw = m.plan_decode.handle[1] + m.plan_head_decode.handle[1]
    t = [0.0, 0.0, 0.0, 0.0]
    n = 16
    for i in range(n):
        t0 = time.perf_counter()
        enc = dev.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        cpi = cp._internal
        t1 = time.perf_counter()
        for pipe, group, x, y, z in raw:
            lib.wgpuComputePassEncoderSetPipeline(cpi, pipe)
            lib.wgpuComputePassEncoderSetBindGroup(cpi, 0, group, 0, null)
            lib.wgpuComputePassEncoderDispatchWorkgroups(cpi, x, y, z)
        t2 = time.perf_counter()
        cp.end()
        t3 = time.perf_counter()
        cb = enc.finish()
        t4 = time.perf_counter()
        orig_submit([cb])
        t5 = time.perf_counter()
        for k, v in enumerate((t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            t[k] += v
    await m.read_log(1)
    out["by_hand_ms"] = {k: round(v / n * 1000, 4) for k, v in zip(("dispatch_calls", "pass_end", "finish", "submit"), t)}
    print(json.dumps(out))

asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m"))
