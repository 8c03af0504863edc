"""Matrix-vector kernel bandwidth, one JSON object on stdout.

    python -m cera_web.tools.bench_kernels [--types Q4_K,Q6_K] [--shapes 4096x4096,14336x4096] [--lanes 32]
                                     [--variants "rpt=1,wg=64,sg=0;rpt=2,wg=128,sg=1"]
                                     [--no-int8] [--variants8 "lanes=16,wg=256,sg=1;lanes=8,wg=256,sg=1"]
    python -m cera_web.tools.bench_kernels --gemm [TOKENS] [--types Q4_1] [--shapes 2048x2048] [--tiles "64,64,1;32,32,4"]
                                     [--no-int8]

For each weight type and shape NxK (N rows of K weights, as in the model: 14336x4096 is an FFN gate/up matrix), the
T = 1 matrix-vector product of shaders/matmul.wgsl (the decode case) is timed on the native backend (wgpu-py), and
the achieved bandwidth is the matrix's packed bytes over the time of one product. Alongside it, a plain read of the
same number of bytes (shaders/bench_read.wgsl) gives the ceiling on this adapter.

How it is timed, so that the number is the kernel's and not the host's:
- many dispatches go into one submit (enough for --target-ms), followed by one small readback; the time of an
  empty submit and readback is taken off; median over repeats, after a warm-up;
- the weights come from one pool of random bytes (each byte masked to 0x3F, which keeps every f16/bf16/f32 field
  finite) larger than the GPU's caches: consecutive dispatches read different copies, so the bytes come from
  memory, not from L2 (--rotate-mib);
- "us"/"gbps": consecutive products are independent (each writes its own output), as kernel throughput;
  "serial_us"/"serial_gbps" (GPUs; --serial): every product writes the same output buffer, so each waits for the
  previous one, as in a decode step, where the gap between dependent dispatches counts too.
On CPU adapters (lavapipe, SwiftShader) lanes 32 and 1 are both measured (the engine uses 1 there).
For the types matvec_q8.wgsl reads (8-bit activations, dot4I8Packed) its product of the same weights is timed too,
before the f32 kernel's (results with "kernel": "matvec_q8"; --variants8 compares its shapes, --no-int8 skips it).
Q4_1 and Q8_0 are timed in the aligned layout the engine keeps them in ("layout": "aligned") and in the file's.

--gemm times the prefill GEMM instead (GFLOP/s = 2 N K T / time; default Llama-3.2-1B's shapes, Q4_1 and Q8_0, 512
tokens): the float32 tiled kernel ("gemm") and, where the device has dot4I8Packed, the int8 one ("gemm8": matmul_i8,
in the aligned layout and the file's where the type has both; the GEMM alone, the quantization of its input apart,
and both together; CERA_WEB_I8_KB=N sets its K step).

--attention HEADS:KV times the prefill attention (heads of --head-dim, default 64: the kernel the engine picks,
attention_tiled.wgsl in 64 or 32 rows for 64, CERA_WEB_ATTN_TILED=32|64 forcing one,
in 32 rows for 128, attention.wgsl for other sizes) of a --gemm TOKENS pass after --pos0 cached tokens, with the engine's key split or each of --splits
(GFLOP/s = 4 * head size * heads * keys summed over the pass's tokens / time).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import struct
import sys
import time

import numpy as np

from .. import formats, kernels
from ..gguf import GGML_BLOCK, GGMLType


# Llama-3.2-1B's prefill products: Wo, Q/K/V stacked, gate/up stacked, down
GEMM_SHAPES = "2048x2048,3072x2048,16384x2048,2048x8192"


def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for part in text.split(","):
        n, _, k = part.strip().lower().partition("x")
        if not (n.isdigit() and k.isdigit()):
            raise SystemExit(f"--shapes wants NxK pairs such as 4096x4096,14336x4096; got {part!r}")
        shapes.append((int(n), int(k)))
    return shapes


def parse_types(text: str | None) -> list[GGMLType]:
    if not text:
        return formats.types_with("f32")
    out = []
    for name in text.split(","):
        try:
            t = GGMLType[name.strip().upper()]
        except KeyError:
            raise SystemExit(f"unknown tensor type {name!r}") from None
        if t not in formats.GPU_TYPES:
            raise SystemExit(f"{t.name} has no GPU kernel (have: {', '.join(f.name for f in sorted(formats.GPU_TYPES))})")
        out.append(t)
    return out


def row_bytes(fmt: GGMLType, K: int) -> int:
    elems, nbytes = GGML_BLOCK[fmt]
    if K % max(elems, 8):
        raise SystemExit(f"K = {K} is not a multiple of {fmt.name}'s block of {elems} weights")
    return K // elems * nbytes


class Bench:
    def __init__(self, dev, *, repeats: int, target_s: float, rotate_bytes: int, serial: bool):
        self.dev = dev
        self.repeats = repeats
        self.target_s = target_s
        self.rotate_bytes = rotate_bytes
        self.serial = serial
        self.align = int(dev.limits.get("min-storage-buffer-offset-alignment", 256))
        self.pool = None
        self.pool_bytes = 0
        self.step = dev.create_buffer(16, kind="uniform")
        dev.write_buffer(self.step, struct.pack("<4I", 1, 0, 0, 1))
        self.sink = dev.create_buffer(16)
        self.overhead = None

    def ensure_pool(self, matrix_bytes: int):
        """One buffer of random bytes holding at least rotate_bytes and one matrix."""
        need = max(self.rotate_bytes, self._aligned(matrix_bytes))
        if need <= self.pool_bytes:
            return
        self.pool = self.dev.create_buffer(need, label="weights pool")
        rng = np.random.default_rng(0)
        chunk = 64 << 20
        for start in range(0, need, chunk):
            n = min(chunk, need - start)
            data = np.frombuffer(rng.bytes(n), np.uint8) & np.uint8(0x3F)
            self.dev.write_buffer(self.pool, data, start)
        self.pool_bytes = need

    def _aligned(self, n: int) -> int:
        return -(-n // self.align) * self.align

    def copies(self, nbytes: int) -> list[tuple]:
        """(buffer, offset, size) bindings of distinct stretches of the pool, each nbytes long."""
        step = self._aligned(nbytes)
        count = max(1, self.pool_bytes // step)
        return [(self.pool, i * step, nbytes) for i in range(count)]

    async def _wait(self):
        await self.dev.read(self.sink, 0, 4)

    async def _time(self, dispatches) -> float:
        dev = self.dev
        plan = dev.record(dispatches)
        dev.submit([plan])
        await self._wait()
        times = []
        for _ in range(self.repeats):
            t0 = time.perf_counter()
            dev.submit([plan])
            await self._wait()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    async def per_dispatch(self, make) -> tuple[float, int]:
        """Seconds per dispatch: make(n) returns a list of n dispatches; n grows until a run takes target_s. The
        fixed cost of a submit and its readback (timed once with an empty submit) is taken off."""
        if self.overhead is None:
            self.overhead = await self._time([])
        n = 4
        while True:
            t = await self._time(make(n))
            if t >= self.target_s or n >= 1 << 16:
                break
            n = max(n * 2, min(int(n * self.target_s / max(t - self.overhead, 1e-6)), n * 64))
        return max(t - self.overhead, t / 2) / n, n

    async def matvec(self, fmt: GGMLType, N: int, K: int, lanes: int, variant: dict | None = None,
                     aligned: bool = False) -> dict:
        """variant: rpt / wg / sg of matmul() (default: what kernels.matvec_shape picks on this device); aligned: the
        weights in the aligned layout (formats.Aligned)."""
        dev = self.dev
        nbytes = N * row_bytes(fmt, K)
        self.ensure_pool(nbytes)
        weights = self.copies(-(-nbytes // 16) * 16)
        x = dev.create_buffer(4 * K)
        dev.write_buffer(x, np.random.default_rng(1).standard_normal(K).astype(np.float32))
        gain = dev.create_buffer(4 * K)
        dev.write_buffer(gain, np.ones(K, np.float32))
        shape = kernels.matvec_shape(K // kernels.block_elems(fmt), 1, dev.is_cpu, dev.subgroup_size)
        shape.update(lanes=lanes, **(variant or {}))
        shape["sg"] = bool(shape["sg"]) and (dev.subgroup_size or 0) >= lanes
        pipe = dev.pipeline(kernels.matmul(fmt, K, N, aligned=aligned, **shape), f"matmul {fmt.name}")
        groups = kernels.spread(kernels.matmul_groups(N, lanes, shape["rpt"], shape["wg"]))
        outs = [dev.create_buffer(4 * N) for _ in weights]
        indep = [dev.bind(pipe, [w, x, y, self.step, gain]) for w, y in zip(weights, outs)]
        per, n = await self.per_dispatch(lambda n: [(pipe, indep[i % len(indep)], groups) for i in range(n)])
        res = {"type": fmt.name, "shape": f"{N}x{K}", "N": N, "K": K, "bytes": nbytes, "lanes": lanes,
               "rpt": shape["rpt"], "wg": shape["wg"], "sg": shape["sg"], "layout": LAYOUT[aligned],
               "copies": len(weights), "dispatches": n, "us": round(per * 1e6, 3),
               "gbps": round(nbytes / per / 1e9, 2)}
        if self.serial:
            chained = [dev.bind(pipe, [w, x, outs[0], self.step, gain]) for w in weights]
            per_s, _ = await self.per_dispatch(lambda n: [(pipe, chained[i % len(chained)], groups) for i in range(n)])
            res.update(serial_us=round(per_s * 1e6, 3), serial_gbps=round(nbytes / per_s / 1e9, 2))
        return res

    async def matvec8(self, fmt: GGMLType, N: int, K: int, variant: dict | None = None,
                      aligned: bool = False) -> dict | None:
        """The same product through matvec_q8.wgsl (8-bit activations, dot4I8Packed); variant: lanes / wg / sg
        (default: kernels.matvec_q8_shape on this device); aligned: as in matvec(). None where the int8 kernel does
        not apply."""
        dev = self.dev
        wg_memory = int(dev.limits.get("max-compute-workgroup-storage-size", 16384))
        shape = kernels.matvec_q8_shape(fmt, K, dev.is_cpu, dev.subgroup_size, wg_memory, N, aligned)
        if shape is None or not dev.int8_dot:
            return None
        shape.update(variant or {})
        shape["sg"] = bool(shape["sg"]) and (dev.subgroup_size or 0) >= shape["lanes"]
        if kernels.matvec_q8_memory(K, **shape) > wg_memory:
            return None
        nbytes = N * row_bytes(fmt, K)
        self.ensure_pool(nbytes)
        weights = self.copies(-(-nbytes // 16) * 16)
        x = dev.create_buffer(4 * K)
        dev.write_buffer(x, np.random.default_rng(1).standard_normal(K).astype(np.float32))
        gain = dev.create_buffer(4 * K)
        dev.write_buffer(gain, np.ones(K, np.float32))
        pipe = dev.pipeline(kernels.matvec_q8(fmt, K, N, aligned=aligned, **shape), f"matvec_q8 {fmt.name}")
        groups = kernels.spread(kernels.matvec_q8_groups(N, shape["lanes"], shape["wg"]))
        outs = [dev.create_buffer(4 * N) for _ in weights]
        indep = [dev.bind(pipe, [w, x, y, self.step, gain]) for w, y in zip(weights, outs)]
        per, n = await self.per_dispatch(lambda n: [(pipe, indep[i % len(indep)], groups) for i in range(n)])
        res = {"kernel": "matvec_q8", "lanes": shape["lanes"], "wg": shape["wg"], "sg": shape["sg"],
               "layout": LAYOUT[aligned],
               "copies": len(weights), "dispatches": n, "us": round(per * 1e6, 3), "gbps": round(nbytes / per / 1e9, 2)}
        if self.serial:
            chained = [dev.bind(pipe, [w, x, outs[0], self.step, gain]) for w in weights]
            per_s, _ = await self.per_dispatch(lambda n: [(pipe, chained[i % len(chained)], groups) for i in range(n)])
            res.update(serial_us=round(per_s * 1e6, 3), serial_gbps=round(nbytes / per_s / 1e9, 2))
        return res

    async def gemm(self, fmt: GGMLType, N: int, K: int, T: int, tile=None) -> dict:
        """The prefill GEMM (matmul_tiled.wgsl) of T tokens through N x K weights: GFLOP/s = 2 N K T / time."""
        dev = self.dev
        nbytes = N * row_bytes(fmt, K)
        self.ensure_pool(nbytes)
        weights = self.copies(nbytes)
        tile = tuple(tile) if tile else kernels.tiled_tile(N, K, T)
        x = dev.create_buffer(4 * K * T)
        dev.write_buffer(x, np.random.default_rng(1).standard_normal(K * T).astype(np.float32))
        gain = dev.create_buffer(4 * K)
        dev.write_buffer(gain, np.ones(K, np.float32))
        step = dev.create_buffer(16, kind="uniform")
        dev.write_buffer(step, struct.pack("<4I", T, 0, 0, T))
        pipe = dev.pipeline(kernels.matmul_tiled(fmt, K, N, tile=tile), f"matmul_tiled {fmt.name}")
        y = dev.create_buffer(4 * N * T)
        binds = [dev.bind(pipe, [w, x, y, step, gain]) for w in weights]
        groups = kernels.tiled_groups(N, T, tile)
        per, n = await self.per_dispatch(lambda n: [(pipe, binds[i % len(binds)], groups) for i in range(n)])
        return {"type": fmt.name, "shape": f"{N}x{K}", "N": N, "K": K, "T": T, "tile": list(tile),
                "dispatches": n, "us": round(per * 1e6, 3), "gflops": round(2 * N * K * T / per / 1e9, 1)}

    async def gemm8(self, fmt: GGMLType, N: int, K: int, T: int, aligned: bool = False) -> dict:
        """The int8 prefill GEMM (matmul_i8.wgsl; aligned: on the aligned layout, the engine's for Q4_1 / Q8_0) on T
        tokens quantized by quantize_rows.wgsl (RMSNorm fused, as in the model): GFLOP/s of the GEMM alone and with
        the quantization (timed apart, one per product)."""
        dev = self.dev
        nbytes = N * row_bytes(fmt, K)
        self.ensure_pool(nbytes)
        weights = self.copies(-(-nbytes // 16) * 16)
        x = dev.create_buffer(4 * K * T)
        dev.write_buffer(x, np.random.default_rng(1).standard_normal(K * T).astype(np.float32))
        gain = dev.create_buffer(4 * K)
        dev.write_buffer(gain, np.ones(K, np.float32))
        step = dev.create_buffer(16, kind="uniform")
        dev.write_buffer(step, struct.pack("<4I", T, 0, 0, T))
        xq = dev.create_buffer(kernels.Q8_BLOCK_BYTES * T * K // 32)
        qpipe = dev.pipeline(kernels.quantize_rows(K, norm=True, eps=1e-5), "quantize_rows")
        quantize = (qpipe, dev.bind(qpipe, [x, xq, step, gain]), (T, 1, 1))
        dev.submit([dev.record([quantize])])                  # the GEMM reads valid blocks
        tr, pair = kernels.matmul_i8_tile(N, T)
        wg_memory = int(dev.limits.get("max-compute-workgroup-storage-size", 16384))
        max_threads = int(dev.limits.get("max-compute-invocations-per-workgroup", 256))
        kg = kernels.matmul_i8_kgroups(N, T, tr, False, wg_memory, max_threads, pair)     # as the engine picks
        pipe = dev.pipeline(kernels.matmul_i8(fmt, K, N, aligned=aligned, rows=tr, pair=pair, kgroups=kg),
                            f"matmul_i8 {fmt.name}")
        groups = kernels.matmul_i8_groups(N, T, tr, pair=pair)
        y = dev.create_buffer(4 * N * T)
        binds = [dev.bind(pipe, [w, xq, y, step]) for w in weights]
        per, n = await self.per_dispatch(lambda n: [(pipe, binds[i % len(binds)], groups) for i in range(n)])
        q_per, _ = await self.per_dispatch(lambda n: [quantize] * n)
        flop = 2 * N * K * T
        return {"type": fmt.name, "shape": f"{N}x{K}", "N": N, "K": K, "T": T, "kernel": "matmul_i8",
                "layout": LAYOUT[aligned], "kb": kernels.Tuning.from_env().i8_kb, "rows": tr,
                "pair": pair, "kgroups": kg,
                "dispatches": n, "us": round(per * 1e6, 3), "gflops": round(flop / per / 1e9, 3),
                "quantize_us": round(q_per * 1e6, 3), "gflops_with_quantize": round(flop / (per + q_per) / 1e9, 3)}

    async def attention(self, heads: int, kv_heads: int, T: int, pos0: int = 0, split: int | None = None,
                        head_dim: int = 64) -> dict:
        """Prefill attention, the kernel the engine picks for heads of head_dim on a GPU (attention_tiled.wgsl in
        64 or 32 rows for 64, in 32 for 128; split > 1: the parts merged by
        attention_combine.wgsl, timed together; attention.wgsl for other sizes) of a T-token pass after pos0 cached
        tokens: GFLOP/s = 4 * head_dim * heads * (keys summed over the pass's tokens) / time."""
        dev, D = self.dev, head_dim
        wg_memory = int(dev.limits.get("max-compute-workgroup-storage-size", 16384))
        rows = kernels.attention_tiled_rows(D, wg_memory, False, dev.subgroup_size)    # as the engine on a GPU
        rows = rows or (32 if D == 64 else 0)       # (the tiled kernel on a device too small for the wide one)
        split = (split or kernels.attention_prefill_split(heads, kv_heads, T, rows)) if rows else 1
        rng = np.random.default_rng(2)
        ctx = pos0 + T
        q = dev.create_buffer(4 * T * heads * D)
        dev.write_buffer(q, rng.standard_normal(T * heads * D).astype(np.float32))
        kv = []
        for _ in range(2):
            b = dev.create_buffer(4 * ctx * kv_heads * D)
            dev.write_buffer(b, rng.standard_normal(ctx * kv_heads * D).astype(np.float32))
            kv.append(b)
        out = dev.create_buffer(4 * T * heads * D)
        step = dev.create_buffer(16, kind="uniform")
        dev.write_buffer(step, struct.pack("<4I", T, pos0, 0, ctx))
        if not rows:
            pipe = dev.pipeline(kernels.attention(heads, kv_heads, D, D ** -0.5), "attention")
            one = [(pipe, dev.bind(pipe, [q, kv[0], kv[1], out, step]), kernels.attention_groups(heads, kv_heads, D, T))]
        elif split == 1:
            pipe = dev.pipeline(kernels.attention_tiled(heads, kv_heads, D, 0.125, tmax=T, rows=rows), "attention_tiled")
            one = [(pipe, dev.bind(pipe, [q, kv[0], kv[1], out, step]),
                    kernels.attention_tiled_groups(heads, kv_heads, T, split, rows))]
        else:
            pipe = dev.pipeline(kernels.attention_tiled(heads, kv_heads, D, 0.125, split=split, tmax=T, rows=rows),
                                "attention_tiled")
            parts = dev.create_buffer(4 * split * T * heads * (D + 4))
            cpipe = dev.pipeline(kernels.attention_combine(heads, D, split, T), "attention_combine")
            one = [(pipe, dev.bind(pipe, [q, kv[0], kv[1], parts, step]),
                    kernels.attention_tiled_groups(heads, kv_heads, T, split, rows)),
                   (cpipe, dev.bind(cpipe, [parts, out, step]), kernels.attention_combine_groups(heads, D, T))]
        per, n = await self.per_dispatch(lambda n: one * n)
        flop = 4 * D * heads * sum(pos0 + t + 1 for t in range(T))
        return {"heads": heads, "kv_heads": kv_heads, "head_dim": D, "T": T, "pos0": pos0,
                "kernel": "attention_tiled" if rows else "attention", "rows": rows, "split": split,
                "dispatches": n,
                "us": round(per * 1e6, 3), "gflops": round(flop / per / 1e9, 1)}

    async def read(self, nbytes: int, per_thread: int = 4) -> dict:
        """The plain read kernel over nbytes (rounded up to 16), from rotating copies like the weights."""
        dev = self.dev
        nbytes = -(-nbytes // 16) * 16
        self.ensure_pool(nbytes)
        n4 = nbytes // 16
        groups = max(1, -(-n4 // (256 * per_thread)))
        pipe = dev.pipeline(kernels.build("bench_read", N4=n4, THREADS=groups * 256), "bench_read")
        binds = [dev.bind(pipe, [w, self.sink]) for w in self.copies(nbytes)]
        spread = kernels.spread(groups)
        per, n = await self.per_dispatch(lambda n: [(pipe, binds[i % len(binds)], spread) for i in range(n)])
        return {"bytes": nbytes, "us": round(per * 1e6, 3), "gbps": round(nbytes / per / 1e9, 2)}


LAYOUT = {True: "aligned", False: "file"}     # "layout" of a result: the weights as the engine keeps them, or as filed


async def run(types, shapes, lanes_list=None, *, repeats=None, target_ms=None, rotate_mib=None, serial=None,
              device=None, variants=None, gemm_tokens=0, tiles=None, int8=True, variants8=None, attention=None,
              attention_pos0=0, splits=None, head_dim=64) -> dict:
    """Matrix-vector bandwidth per type and shape; with gemm_tokens, the prefill GEMM's GFLOP/s over that many tokens
    instead (tiles: the tiles to compare, default the one the engine picks), and beside it in "gemm8" the int8 GEMM
    (matmul_i8) for types that have one when the device has dot4I8Packed and int8."""
    from ..gpu.native import NativeDevice
    dev = device or NativeDevice.create()
    cpu = dev.is_cpu
    lanes_list = lanes_list or ([32, 1] if cpu else [32])
    bench = Bench(dev, repeats=repeats or (3 if cpu else 7), target_s=(target_ms or 20) / 1000,
                  rotate_bytes=int((rotate_mib if rotate_mib is not None else (4 if cpu else 512)) * 2**20),
                  serial=(not cpu) if serial is None else serial)
    out = {"adapter": dev.name, "cpu_adapter": cpu, "rotate_mib": round(bench.rotate_bytes / 2**20, 1),
           "int8_dot": bool(dev.int8_dot)}
    if attention:
        out["attention"] = []
        for heads, kv_heads in attention:
            for split in splits or [None]:
                r = await bench.attention(heads, kv_heads, gemm_tokens or 512, attention_pos0, split, head_dim)
                out["attention"].append(r)
                print(f"{r['kernel']} {heads}/{kv_heads} heads of {head_dim} T {r['T']} after {r['pos0']} split {r['split']}: "
                      f"{r['us']:9.1f} us, {r['gflops']:8.1f} GFLOP/s", file=sys.stderr)
        return out
    if gemm_tokens:
        out["gemm"] = []
        for N, K in shapes:
            for fmt in types:
                for tile in tiles or [None]:
                    r = await bench.gemm(fmt, N, K, gemm_tokens, tile)
                    out["gemm"].append(r)
                    print(f"{fmt.name:5s} {N}x{K} T {gemm_tokens} tile {r['tile']}: {r['gflops']:9.1f} GFLOP/s "
                          f"({r['us']:.1f} us)", file=sys.stderr)
                layouts = [a for a in (True, False) if formats.reader(fmt, "matmul_i8", a) is not None]
                if not (int8 and getattr(dev, "int8_dot", False) and layouts):
                    continue
                out.setdefault("gemm8", [])
                for aligned in layouts:             # the engine's layout first
                    r = await bench.gemm8(fmt, N, K, gemm_tokens, aligned)
                    out["gemm8"].append(r)
                    print(f"{fmt.name:5s} {N}x{K} T {gemm_tokens} matmul_i8 {r['layout']}: {r['gflops']:9.1f} GFLOP/s "
                          f"({r['us']:.1f} us; with quantize {r['gflops_with_quantize']:.1f})", file=sys.stderr)
        return out
    if bench.rotate_bytes >= 64 << 20:   # the read kernel over the whole pool: the adapter's large-transfer ceiling
        out["peak_read_gbps"] = (await bench.read(bench.rotate_bytes))["gbps"]
    out["results"] = []
    for N, K in shapes:
        for fmt in types:
            nbytes = N * row_bytes(fmt, K)
            ceiling = await bench.read(nbytes)
            # the engine's layout first (aligned for the types that have it), then the file's
            layouts = [True, False] if fmt in formats.ALIGNED_TYPES else [False]
            if int8 and formats.reader(fmt, "matvec_q8") is not None:     # the int8-activation kernel, each variant, beside the f32 one
                for v, aligned in [(v, a) for a in layouts for v in (variants8 or [None])]:
                    r = await bench.matvec8(fmt, N, K, v, aligned)
                    if r is None:
                        continue
                    r.update(type=fmt.name, shape=f"{N}x{K}", N=N, K=K, bytes=nbytes, read_gbps=ceiling["gbps"],
                             of_read=round(r["gbps"] / ceiling["gbps"], 3) if ceiling["gbps"] else None)
                    out["results"].append(r)
                    print(f"{fmt.name:5s} {N}x{K} int8 {r['layout']:7s} lanes {r['lanes']:2d} wg {r['wg']:3d} "
                          f"sg {int(r['sg'])}: "
                          f"{r['gbps']:9.2f} GB/s" + (f", serial {r['serial_gbps']:.2f}" if "serial_gbps" in r else ""),
                          file=sys.stderr)
            for lanes, variant, aligned in [(lanes, v, a) for a in layouts for lanes in lanes_list
                                            for v in (variants or [None])]:
                r = await bench.matvec(fmt, N, K, lanes, variant, aligned)
                r["kernel"] = "matmul"
                r["read_gbps"] = ceiling["gbps"]
                # a very slow (CPU) adapter can round to 0.00 GB/s on a busy machine: no ratio then
                r["of_read"] = round(r["gbps"] / ceiling["gbps"], 3) if ceiling["gbps"] else None
                out["results"].append(r)
                ratio = f"{100 * r['of_read']:.0f}%" if r["of_read"] is not None else "?"
                print(f"{fmt.name:5s} {N}x{K} {r['layout']:7s} lanes {lanes:2d} rpt {r['rpt']} wg {r['wg']:3d} sg {int(r['sg'])}: "
                      f"{r['gbps']:9.2f} GB/s "
                      f"({ratio} of read {ceiling['gbps']:.2f})"
                      + (f", serial {r['serial_gbps']:.2f}" if "serial_gbps" in r else ""), file=sys.stderr)
    return out


def _variants(text, flag, keys):
    """'k=N,k=N;k=N' -> [{k: N, ...}, ...] for the keys a flag allows (None when the flag is not given)."""
    if not text:
        return None
    out = []
    for part in text.split(";"):
        v = {}
        for item in filter(None, part.split(",")):
            key, _, value = item.partition("=")
            if key.strip() not in keys or not value.strip().isdigit():
                raise SystemExit(f"{flag}: {item!r} is not one of {', '.join(k + '=N' for k in keys)}")
            v[key.strip()] = int(value)
        out.append(v)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m cera_web.tools.bench_kernels", description=__doc__.split("\n\n")[0])
    p.add_argument("--types", help="comma-separated GGML types (default: every type with a GPU kernel)")
    p.add_argument("--shapes", help="comma-separated NxK (rows x row length); default 4096x4096,14336x4096, with "
                                    "--gemm Llama-3.2-1B's " + GEMM_SHAPES)
    p.add_argument("--lanes", help="comma-separated lanes per row (default 32; 32,1 on CPU adapters)")
    p.add_argument("--repeats", type=int, help="timed runs per measurement, median taken (default 7; 3 on CPU)")
    p.add_argument("--target-ms", type=float, help="wall time of the longer run of a measurement (default 20)")
    p.add_argument("--rotate-mib", type=float,
                   help="size of the pool the weights rotate through (default 512, well past a GPU's L2; 4 on CPU)")
    p.add_argument("--serial", action=argparse.BooleanOptionalAction, default=None,
                   help="also time dependent products (default: on for GPUs)")
    p.add_argument("--variants", help="semicolon-separated matrix-vector shapes to compare, each "
                                      "rpt=N,wg=N,sg=0|1 (default: the one the engine picks on this device)")
    p.add_argument("--int8", action=argparse.BooleanOptionalAction, default=True,
                   help="also time the 8-bit-activation kernels (matvec_q8; with --gemm matmul_i8) for their "
                        "types (default: on, where the adapter's WGSL has dot4I8Packed); results carry \"kernel\": "
                        "\"matvec_q8\" (--gemm: under \"gemm8\")")
    p.add_argument("--variants8", help="semicolon-separated matvec_q8 shapes to compare, each lanes=N,wg=N,sg=0|1 "
                                       "(default: the engine's choice; CERA_WEB_MATVEC8 sets that)")
    p.add_argument("--gemm", type=int, nargs="?", const=512, default=0, metavar="TOKENS",
                   help="time the prefill GEMM over TOKENS tokens (default 512) instead: GFLOP/s per shape")
    p.add_argument("--tiles", help="with --gemm: semicolon-separated tiles to compare, e.g. '64,64,1;32,32,4' "
                                   "(default: the engine's choice per shape)")
    p.add_argument("--attention", metavar="HEADS:KV,...",
                   help="time the prefill attention (heads of 64) instead, for these head counts, over --gemm TOKENS "
                        "tokens (default 512) after --pos0 cached ones, e.g. 9:3,32:8")
    p.add_argument("--pos0", type=int, default=0, help="with --attention: tokens already in the cache")
    p.add_argument("--head-dim", type=int, default=64, help="with --attention: the head size (default 64)")
    p.add_argument("--splits", help="with --attention: comma-separated key splits to compare (default: the engine's)")
    args = p.parse_args(argv)
    attention = None
    if args.attention:
        try:
            attention = [tuple(int(v) for v in item.split(":")) for item in args.attention.split(",")]
            assert all(len(a) == 2 and a[0] % a[1] == 0 for a in attention)
        except (ValueError, AssertionError):
            raise SystemExit(f"--attention: {args.attention!r} is not HEADS:KV,... (HEADS a multiple of KV)")
    splits = [int(v) for v in args.splits.split(",")] if args.splits else None
    shapes = args.shapes or (GEMM_SHAPES if args.gemm else "4096x4096,14336x4096")
    types = args.types or ("Q4_1,Q8_0" if args.gemm else None)
    tiles = [tuple(int(v) for v in t.split(",")) for t in args.tiles.split(";")] if args.tiles else None
    for t in tiles or []:
        if t not in kernels.TILES:
            raise SystemExit(f"--tiles: {t} is not one of {kernels.TILES}")
    variants = _variants(args.variants, "--variants", ("rpt", "wg", "sg"))
    variants8 = _variants(args.variants8, "--variants8", ("lanes", "wg", "sg"))
    for v in variants8 or []:
        if v.get("lanes", 1) & (v.get("lanes", 1) - 1) or v.get("wg", 64) not in (64, 128, 256) \
                or v.get("wg", 256) % v.get("lanes", 1):
            raise SystemExit(f"--variants8: {v}: lanes a power of two dividing wg, wg 64, 128 or 256")
    lanes = [int(v) for v in args.lanes.split(",")] if args.lanes else None
    for v in lanes or []:
        if v < 1 or v > 64 or v & (v - 1):
            raise SystemExit(f"--lanes wants powers of two up to 64, got {v}")
    result = asyncio.run(run(parse_types(types), parse_shapes(shapes), lanes, repeats=args.repeats,
                             target_ms=args.target_ms, rotate_mib=args.rotate_mib, serial=args.serial,
                             variants=variants, gemm_tokens=args.gemm, tiles=tiles, int8=args.int8,
                             attention=attention, attention_pos0=args.pos0, splits=splits, head_dim=args.head_dim,
                             variants8=variants8))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
