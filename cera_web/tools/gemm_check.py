"""The prefill products that kernels.choose_product picks on a device, against numpy in float64: for testing a GPU's
own kernels where the test suite cannot run (the page on a real GPU: web/bench.html?check=1 runs it on the page's
device, e.g. the subgroup matrix kernel on an H200 in Chromium; tests/test_sgmat.py runs it natively).

Each case makes random weights of a format, inputs and an output buffer, runs the dispatches choose_product gives for
a prefill pass on this device, and reports the kernels that ran and the largest error relative to the largest
|result|, against the tolerance of the least exact kernel among them (TOLERANCE)."""
from __future__ import annotations

import struct

import numpy as np

from .. import kernels, quants
from ..gguf import GGML_BLOCK, GGMLType

# largest |GPU - numpy| / max |numpy| allowed, by the least exact kernel of a product: f16 inputs and weights
# (matmul_sgmat), 8-bit activation blocks (matmul_i8), float32 sums (the rest)
TOLERANCE = {"matmul_sgmat": 4e-3, "matmul_i8": 1.5e-2}
FLOAT32_TOLERANCE = 1e-4

# (format, tokens, rows, K, options): tiles past both ends, every option of the products a model runs
CASES = [
    (GGMLType.Q4_K, 100, 150, 512, dict(norm=True, glu=True)),
    (GGMLType.Q6_K, 70, 200, 512, dict(accum=True, yoff=3, ystride=210)),
    (GGMLType.Q8_0, 37, 69, 352, dict(glu=True, gelu=True)),
    (GGMLType.Q4_1, 130, 64, 256, dict(norm=True)),
    (GGMLType.Q5_0, 64, 64, 512, dict()),
    (GGMLType.F16, 65, 96, 128, dict(accum=True)),
]


def weights(fmt, n: int, k: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Random packed rows [n, k] of fmt: (raw bytes, dequantized float64). Quantized from normal values where
    cera_web.quants has a quantizer; else random blocks with small ordinary f16 scale fields."""
    w = rng.standard_normal((n, k)).astype(np.float32)
    make = {GGMLType.Q8_0: quants.quantize_q8_0, GGMLType.Q4_0: quants.quantize_q4_0,
            GGMLType.Q4_1: quants.quantize_q4_1}.get(fmt)
    if make is not None:
        raw = make(w)
    elif fmt == GGMLType.F16:
        raw = w.astype("<f2").view(np.uint8)
    else:
        be, bb = GGML_BLOCK[fmt]
        raw = rng.integers(0, 256, size=(n * k // be, bb), dtype=np.uint8)
        fields = {GGMLType.Q4_K: [0, 2], GGMLType.Q6_K: [208], GGMLType.Q5_0: [0]}[fmt]
        for at in fields:
            raw[:, at:at + 2] = (rng.uniform(0.2, 1.0, raw.shape[0]) * 0.05).astype(np.float16).view(np.uint8) \
                .reshape(-1, 2)
    raw = np.ascontiguousarray(raw).reshape(n, -1)
    return raw, quants.dequantize(raw, fmt, (n, k)).astype(np.float64)


def reference(x, g, w, y0, N, *, norm=False, eps=0.0, glu=False, gelu=False, accum=False, yoff=0):
    """float64 numpy of what the product writes into y0."""
    xin = x.astype(np.float64)
    if norm:
        xin = xin / np.sqrt((xin ** 2).mean(-1, keepdims=True) + eps) * g
    want = y0.astype(np.float64).copy()
    if glu:
        a, b = xin @ w[:N].T, xin @ w[N:].T
        act = a * 0.5 * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3))) if gelu else \
            a * np.exp(-np.logaddexp(0, -a))
        want[:, yoff:yoff + N] = act * b
    elif accum:
        want[:, yoff:yoff + N] += xin @ w.T
    else:
        want[:, yoff:yoff + N] = xin @ w.T
    return want


async def check(dev, fmt, T: int, N: int, K: int, *, seed: int = 0, **opts) -> dict:
    """One product on ``dev`` as choose_product runs it for a prefill pass of T tokens: its kernels, error and
    tolerance."""
    rng = np.random.default_rng(seed + int(fmt))
    glu = opts.get("glu", False)
    raw, w = weights(fmt, 2 * N if glu else N, K, rng)
    x = rng.standard_normal((T, K)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, K).astype(np.float32)
    eps = 1e-6 if opts.get("norm") else 0.0
    stride = opts.pop("ystride", None) or N + opts.get("yoff", 0)
    y0 = rng.standard_normal((T, stride)).astype(np.float32)
    adapter = kernels.Adapter.of(dev)
    plan = kernels.choose_product(fmt, N, K, T, adapter, kernels.Tuning.from_env(), eps=eps, ystride=stride, **opts)
    bufs = {}

    def buf(data=None, nbytes=None):
        b = dev.create_buffer(nbytes if data is None else data.nbytes)
        if data is not None:
            dev.write_buffer(b, np.ascontiguousarray(data))
        return b
    step = dev.create_buffer(16, kind="uniform")
    dev.write_buffer(step, struct.pack("<4I", T, 0, 0, T))
    bufs.update(w=buf(raw), x=buf(x), y=buf(y0), step=step, gain=buf(g), ones=buf(np.ones(K, np.float32)),
                normed=buf(nbytes=x.nbytes), xq=buf(nbytes=T * K // 32 * 40))
    work = []
    for d in plan:
        if d.scratch:      # the role it writes: K parts (sums) or an f16 copy (xh, wh)
            bufs[d.scratch_role] = buf(nbytes=d.scratch)
        pipe = dev.pipeline(d.wgsl(), d.kernel)
        work.append((pipe, dev.bind(pipe, [bufs[b] for b in d.buffers]), d.groups))
    dev.submit([dev.record(work)])
    got = np.frombuffer(await dev.read(bufs["y"], 0, y0.nbytes), np.float32).reshape(T, stride)
    want = reference(x, g, w, y0, N, eps=eps, **opts)
    for b in bufs.values():
        dev.release(b)
    ran = [d.kernel for d in plan]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    tol = max([TOLERANCE.get(k, FLOAT32_TOLERANCE) for k in ran])
    return {"type": GGMLType(fmt).name, "tokens": T, "rows": N, "K": K, **opts, "kernels": ran,
            "error": float(f"{err:.3g}"), "tolerance": tol, "ok": bool(err <= tol)}


async def run(dev) -> dict:
    """Every case of CASES on ``dev``: {"subgroup_matrix": the device's configuration, "cases": [...], "ok"}."""
    cases = [await check(dev, fmt, T, N, K, seed=i, **dict(opts)) for i, (fmt, T, N, K, opts) in enumerate(CASES)]
    return {"subgroup_matrix": getattr(dev, "subgroup_matrix", None), "cases": cases,
            "ok": all(c["ok"] for c in cases)}
