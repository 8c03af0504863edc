"""Time each SmolLM2 prefill GEMM shape (T=512, Q4_1) with the old kernel and every tile of the new one; check the
new one against numpy on the realistic shapes. Prints JSON; writes best.json (shape -> best tile)."""
import asyncio, json, struct, sys, time
import numpy as np
from cera_web import kernels, quants
from cera_web.gguf import GGMLType
from cera_web.gpu.native import NativeDevice

dev = NativeDevice.create()
print(dev.adapter_info if hasattr(dev, "adapter_info") else "", file=sys.stderr)
import os
T, REPS = (64, 2) if os.environ.get("QUICK") else (512, 50)
SHAPES = {"qkv": (576, 960, dict(norm=True)), "o": (576, 576, dict(accum=True)),
          "gate_up": (576, 1536, dict(norm=True, glu=True)), "down": (1536, 576, dict(accum=True))}
rng = np.random.default_rng(0)


def buf(a):
    b = dev.create_buffer(a.nbytes); dev.write_buffer(b, np.ascontiguousarray(a)); return b


def read(b, n):
    return np.frombuffer(asyncio.run(dev.read(b, 0, n * 4)), np.float32)


step = dev.create_buffer(16, kind="uniform")


def set_tokens(n):
    dev.write_buffer(step, struct.pack("<4I", n, 0, 0, n))


def old_text(fmt, K, N, **kw):
    kernels._read.cache_clear()
    save = kernels.SHADER_DIR
    kernels.SHADER_DIR = __import__("pathlib").Path("base/shaders").resolve()
    try:
        return kernels.build("matmul_tiled", fmt=fmt, K=K, N=N, NORM=kw.get("norm", False), EPS=1e-5,
                             ACCUM=kw.get("accum", False), GLU=kw.get("glu", False), YSTRIDE=N, YOFF=0)
    finally:
        kernels.SHADER_DIR = save
        kernels._read.cache_clear()


def timeit(text, bufs, groups):
    pipe = dev.pipeline(text)
    sub = dev.record([(pipe, dev.bind(pipe, bufs), groups)] * REPS)
    dev.submit([sub]); read(bufs[2], 1)
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        dev.submit([sub]); read(bufs[2], 1)
        best = min(best, (time.perf_counter() - t0) / REPS * 1e6)
    return round(best, 2)


out = {"time_us": {}, "check": {}}
best = {}
fmt = GGMLType.Q4_1
for name, (K, N, kw) in SHAPES.items():
    rows = 2 * N if kw.get("glu") else N
    w = (rng.standard_normal((rows, K)) * 0.05).astype(np.float32)
    raw = quants.quantize_q4_1(w).tobytes()
    wq = quants.dequantize(raw, fmt, w.shape).astype(np.float64)
    x = rng.standard_normal((T, K)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, K).astype(np.float32)
    y0 = rng.standard_normal((T, N)).astype(np.float32)
    W = dev.create_buffer(len(raw)); dev.write_buffer(W, raw)
    X, G, Y = buf(x), buf(g), buf(y0)
    bufs = [W, X, Y, step, G]
    set_tokens(T)
    row = {"old": timeit(old_text(fmt, K, N, **kw), bufs, (-(-N // 32), -(-T // 32), 1))}
    for u in (1, 2):
        kernels.TILED_UNROLL = u
        for tile in kernels.TILES:
            row["x".join(map(str, tile)) + f"u{u}"] = timeit(kernels.matmul_tiled(fmt, K, N, eps=1e-5, tile=tile, **kw),
                                                             bufs, kernels.tiled_groups(N, T, tile))
    out["time_us"][name] = row
    # correctness on the real GPU: every tile, a full pass and a partial one (n_tokens 300 of a 512 dispatch)
    for n_tok in (T, T * 3 // 5):
        xn = x.astype(np.float64)
        if kw.get("norm"):
            xn = xn / np.sqrt((xn ** 2).mean(-1, keepdims=True) + 1e-5) * g
        if kw.get("glu"):
            a, b = xn @ wq[:N].T, xn @ wq[N:].T
            want = a / (1 + np.exp(-a)) * b
        else:
            want = xn @ wq.T
        if kw.get("accum"):
            want = want + y0
        want[n_tok:] = y0[n_tok:]
        for tile, u in [(t, u) for t in kernels.TILES for u in (1, 2)]:
            kernels.TILED_UNROLL = u
            Y2 = buf(y0)
            set_tokens(n_tok)
            pipe = dev.pipeline(kernels.matmul_tiled(fmt, K, N, eps=1e-5, tile=tile, **kw))
            dev.submit([dev.record([(pipe, dev.bind(pipe, [W, X, Y2, step, G]), kernels.tiled_groups(N, T, tile))])])
            got = read(Y2, T * N).reshape(T, N)
            err = float(np.abs(got - want).max() / np.abs(want).max())
            out["check"][f"{name}/{n_tok}/" + "x".join(map(str, tile)) + f"u{u}"] = err
            dev.release(Y2)
    set_tokens(T)
# one unroll for all shapes (the better sum of per-shape bests), then each shape's best tile with it
tot = {u: sum(min(v for k, v in r.items() if k.endswith(f"u{u}")) for r in out["time_us"].values()) for u in (1, 2)}
ub = min(tot, key=tot.get)
best = {n: min((k for k in r if k.endswith(f"u{ub}")), key=r.get) for n, r in out["time_us"].items()}
out["best"] = best
out["best_sum_us_by_unroll"] = tot
out["check_max_rel_err"] = max(out["check"].values())
json.dump(best, open("best.json", "w"))
print(json.dumps(out))
