"""Preflight: will a model run here, in how much memory and at what speed, from its header alone (issue 30).

    report = preflight(gguf, file_size, device=dev, bench=await gpu_microbench(dev), quota={...})
    for line in describe(report): print(line)

Everything is computed from the GGUF header (its tensor table and the ModelSpec) and, for the speed, from a short
micro-benchmark of where the model will run; no weight is read. The one source of these numbers: ``python -m cera_web
info MODEL --fit`` prints ``describe(report)`` and the page's worker posts ``report`` (webapp.preflight), which the
page's model menu shows.

Memory (bytes):
- GPU: the weights as packed in the file (tensor sizes summed), the KV cache (spec.kv_bytes: per attention layer one
  K and one V buffer of context × kv_heads × head_dim elements of 4 (f32) or 2 (f16) bytes), and scratch: the
  activation buffers of a prefill chunk (hidden, Q/K/V, FFN and the normed input, float32), the logits of the
  sampler and of a verify pass (16 rows); see scratch_bytes.
- The CPU path (numpy in Pyodide; loading.choose_backend decides who gets it) holds the weights its WebAssembly
  kernels multiply packed, the rest as float32 (loading.cpu_weight_bytes), and its KV cache; HEAP_BYTES is the
  usable size of a wasm heap.

Fit, in order: the device's buffer limits (models.memory.fit_report: the largest tensor piece and one layer's K/V
buffer must fit one binding), then the total, which WebGPU does not report: where a probe allocation was made
(probe_memory: buffers of at most maxBufferSize created up to the bytes the model needs, at most PROBE_CAP, in
validation and out-of-memory error scopes, and destroyed as soon as the device has answered), its answer; else the
total is not checked. max_context is the largest context that fits both (exact, in tokens); auto_fit picks a load's
context and cache type from it.

Speed: decode is bound by the bytes a token reads (every weight except the embedding table, which gives one row;
a tied LM head reads all of it) and, on GPUs, by the chain of ~150 dependent dispatches a token; prefill by the
multiply-adds of the matrix products. gpu_microbench measures on the device: read bandwidth, the time of one
dependent dispatch, float32 multiply-add and (with dot4I8Packed) int8 dot throughput, and the matrix-vector product
of the decode kernels on a quantized matrix; cpu_microbench measures the CPU path's own products (its WebAssembly
kernels per weight type, and reference._linear's float32) for one token and a 16-token chunk. estimate() turns them and the model's costs into tokens a second; the
constants are calibrated against measured runs (BENCHMARKS.md: "Preflight estimates").
"""
from __future__ import annotations

import math
import struct
import time

from .errors import CeraError, UnsupportedModelError
from .models.memory import CONTEXT_SIZE, fit_report, in_256s
from .models.spec import KV_WIDTH, model_spec

HEAP_BYTES = 3_800_000_000      # the wasm32 heap a Python in Pyodide can use (MemoryError after ~3.8 GB)
PROBE_CAP = 8 << 30              # a probe allocation never asks for more than this
BIG_MATRIX = 2 << 20             # the CPU path: a matrix past this many bytes runs at the big-matrix rate
MIN_CONTEXT = 256                # below this a model is refused: too small to be useful (as loading.auto_context)


# -- what a model costs, from its header --------------------------------------------------------------------------

def model_costs(gguf, spec) -> dict:
    """Parameters, tensor types and the work of one token, from the header's tensor table and the spec.

    Returns {params, weights (bytes), types: {TYPE: {tensors, params, bytes}}, decode_bytes (bytes a decode step
    reads: every tensor once except the token embedding table, of which one row, unless it is also the LM head),
    matrix_params (weights multiplied per token), flops (2 × matrix_params), dispatches (GPU dispatches a decode
    step, as the GPU model records them: 5 a layer, one more where Q/K/V are apart (types, biases, QK norms), two for
    post-norms, 4 for
    embedding, final norm, head and argmax)}."""
    types: dict = {}
    by_type: dict = {}                  # matrix weights multiplied a token, by type (the CPU path's cost)
    big_by_type: dict = {}              # ... of them in matrices past BIG_MATRIX bytes
    params = weights = decode = matrix = n_matrices = 0
    tied = spec.lm_head == "token_embd.weight"
    for t in gguf.tensors.values():
        e = types.setdefault(t.type.name, {"tensors": 0, "params": 0, "bytes": 0})
        e["tensors"] += 1
        e["params"] += t.n_elements
        e["bytes"] += t.nbytes
        params += t.n_elements
        weights += t.nbytes
        if t.name == "token_embd.weight" and not tied:
            rows = t.shape[-1] if len(t.shape) > 1 else 1
            decode += t.nbytes // max(rows, 1)
        else:
            decode += t.nbytes
            if len(t.shape) > 1 and t.name != "token_embd.weight" or (t.name == "token_embd.weight" and tied):
                matrix += t.n_elements
                n_matrices += 1
                by_type[t.type.name] = by_type.get(t.type.name, 0) + t.n_elements
                if t.nbytes > BIG_MATRIX:
                    big_by_type[t.type.name] = big_by_type.get(t.type.name, 0) + t.n_elements
    dispatches = 4
    for i, layer in enumerate(spec.layers):
        n = 5
        if layer.attention:
            qkv = {gguf.tensors[f"blk.{i}.attn_{x}.weight"].type for x in "qkv" if f"blk.{i}.attn_{x}.weight"
                   in gguf.tensors}
            n += 1 if len(qkv) > 1 or spec.qkv_bias or spec.qk_norm else 0   # Q/K/V apart (measured: 148 a token
                                                                            # for Qwen2.5-0.5B and Gemma 3 270M)
        if layer.post_norms:
            n += 2
        dispatches += n
    return {"params": params, "weights": weights, "types": dict(sorted(types.items(), key=lambda kv: -kv[1]["bytes"])),
            "decode_bytes": decode, "matrix_params": matrix, "matrix_by_type": by_type, "big_by_type": big_by_type,
            "matrices": n_matrices,
            "flops": 2 * matrix,
            "dispatches": dispatches}


def scratch_bytes(spec, chunk: int) -> int:
    """GPU bytes besides the packed weights and the KV cache that a load allocates (fitted to gpu_memory's "other" of
    SmolLM2, Gemma 3 270M and Qwen2.5-0.5B at chunks 64 and 512: exact per row): per prefill row the float32 activations
    (residual, normed input and FFN output: hidden each; Q/K/V; the attention output; the gated FFN's ffn; post-norm
    models one more Q-sized row), vocabulary-sized rows: the logits, the sampler's three (its mask and bias, scratch,
    sampled-from logits) and a speculative verify pass's logits (16 rows; Engine.warm_up makes the sampler and the
    verify pass at a load on GPUs, software adapters at their first use), and small fixed buffers (step uniforms, token
    log, the sampler's ring and logprobs). The file's vectors (norm gains, biases) are counted with the weights. Not
    counted: the all-row logits of prompt logprobs (made on demand) and a verify pass's split attention parts (verify
    rows x ranges x (q + heads) floats: 2 MB at the 1B shape, the size of a prefill row's activations)."""
    from .models.transformer import Transformer
    q = spec.heads * spec.head_dim
    kv = 2 * spec.kv_heads * spec.head_dim
    post = any(layer.post_norms for layer in spec.layers)
    row = 4 * (3 * spec.hidden + 2 * q + kv + spec.ffn + (q if post else 0))
    return chunk * row + 4 * spec.vocab * (4 + min(Transformer.VERIFY_ROWS, chunk)) + (128 << 10)


def memory_need(spec, costs: dict, context: int, kv_cache: str, backend: str, chunk: int) -> dict:
    """{weights, kv_cache, scratch, total} in bytes for a load at ``context`` tokens (backend "webgpu": packed weights
    on the GPU; "cpu": float32 weights in the heap)."""
    kv = spec.kv_bytes(context, kv_cache)[1]
    if backend == "cpu":                # the CPU kernels keep their types packed; the rest is float32
        kept = costs.get("cpu_kernel_types", ())
        w = sum(v["bytes"] if k in kept else 4 * v["params"] for k, v in costs["types"].items())
        scratch = 4 * chunk * (4 * spec.hidden + 2 * spec.ffn) + 8 * spec.vocab * chunk
    else:
        w = costs["weights"]
        scratch = scratch_bytes(spec, chunk)
    return {"weights": w, "kv_cache": kv, "scratch": scratch, "total": w + kv + scratch}


# -- does it fit ---------------------------------------------------------------------------------------------------

def _binding(limits: dict) -> int:
    return min(int(limits.get("max-storage-buffer-binding-size", 1 << 27)), int(limits.get("max-buffer-size", 1 << 28)))


def max_context(spec, costs: dict, limits: dict | None, kv_cache: str, backend: str, chunk: int,
                budget: int | None) -> int:
    """The most tokens of context that fit: one layer's K or V buffer within the binding limit (GPU), and the whole
    need (memory_need) within ``budget`` bytes where one is known (a probe's answer, or the heap on the CPU path).
    Exact (not rounded); 0 when not even one token fits."""
    layer, total = spec.kv_bytes(1, kv_cache)
    most = 1 << 30
    if backend != "cpu" and limits is not None and layer:
        most = _binding(limits) // layer
    if budget is not None and total:
        base = memory_need(spec, costs, 0, kv_cache, backend, chunk)["total"]
        most = min(most, max(budget - base, -1) // total) if budget >= base else 0
    return max(most, 0)


def fits(spec, costs: dict, limits: dict | None, context: int, kv_cache: str, backend: str, chunk: int,
         budget: int | None) -> bool:
    """Whether a load at ``context`` tokens fits (the same rule as max_context)."""
    return 0 < context <= max_context(spec, costs, limits, kv_cache, backend, chunk, budget)


def auto_fit(spec, costs: dict, *, limits: dict | None, features=(), backend: str = "webgpu", chunk: int = 512,
             budget: int | None = None, context: int | None = None, kv_cache: str | None = None) -> dict:
    """A load's context and KV cache type: what was asked where it fits; else, for what the caller left unset (None),
    the largest that fits: the f16 cache where the device has shader-f16 and f32 does not reach the context, then
    the largest context (at most the trained one, in 256s). Returns {context, kv_cache, fits, changed: what was
    changed and why, or None}. Raises UnsupportedModelError with the numbers where no context of MIN_CONTEXT tokens
    fits with any allowed cache type."""
    want = context or CONTEXT_SIZE
    kvs = [kv_cache] if kv_cache else ["f32"] + (["f16"] if backend != "cpu" and "shader-f16" in features else [])
    for kv in kvs:
        if fits(spec, costs, limits, want, kv, backend, chunk, budget):
            changed = None if kv == kvs[0] else f"the f16 KV cache: f32 does not fit {want} tokens"
            return {"context": want, "kv_cache": kv, "fits": True, "changed": changed}
    best = max(kvs, key=lambda kv: max_context(spec, costs, limits, kv, backend, chunk, budget))
    most = max_context(spec, costs, limits, best, backend, chunk, budget)
    if most < MIN_CONTEXT:
        need = memory_need(spec, costs, MIN_CONTEXT, best, backend, chunk)
        where = f"{budget:,} bytes available" if budget is not None else \
            f"a binding limit of {_binding(limits or {}):,} bytes"
        raise UnsupportedModelError(
            f"this model does not fit here at any useful context: {MIN_CONTEXT} tokens need {need['total']:,} bytes "
            f"(weights {need['weights']:,}, KV cache {need['kv_cache']:,} ({best}), scratch {need['scratch']:,}) "
            f"against {where}; use a smaller model or a device with more memory")
    offer = in_256s(min(most, want))         # as loading.auto_context: the most that fits, in 256s
    if context is not None:     # asked for: not changed, the largest is offered
        return {"context": context, "kv_cache": kvs[0], "fits": False, "offer": offer, "offer_kv": best,
                "changed": None}
    return {"context": offer, "kv_cache": best, "fits": True,
            "changed": f"{offer} tokens ({best} KV cache): {want} do not fit"}


# -- micro-benchmarks ------------------------------------------------------------------------------------------------

def cpu_kernel_types() -> set:
    """Names of the types the CPU path keeps packed and multiplies with its WebAssembly kernels (cera_web.cpu_kernels)
    where they are built and wanted; empty where it uses float32 numpy products only."""
    from .cpu_kernels import KERNEL_TYPES, WASM
    from .models.cpu import kernels_wanted
    return {t.name for t in KERNEL_TYPES} if kernels_wanted() and WASM.exists() else set()


async def cpu_microbench(seconds: float = 0.1) -> dict:
    """The CPU path's own products, timed here (about ``seconds``): reference._linear of a 4096 x 1024 float32 matrix
    (16 MiB: more than a CPU cache holds) by one token (decode) and by a 16-token chunk (prefill), and, where the CPU
    kernels run, each kernel type's product (cpu_kernels: 1024 x 1024 blocks of random bytes) the same two ways,
    and a 4096 x 4096 Q4_K product past the caches (big_ratio: its rate over the 1024 x 1024 one's).
    Returns {"f32": {"t1", "t16"}, TYPE: {"t1", "t16"}, ..., "call_s"}: weights multiplied a second per token, and
    the time of one small product (the per-call overhead)."""
    import numpy as np
    from .gguf import GGML_BLOCK, GGMLType
    from .reference import _causal_gqa, _linear, rms_norm, rope_inv_freq, rope_neox, silu
    rng = np.random.default_rng(0)

    def rate(fn, n_params, rows, budget):
        """n_params × rows over the median time of one call, timed in batches of at least 2 ms (a browser's clock
        ticks in 0.1 ms steps; the median leaves a busy machine's pauses out)."""
        fn(rows)
        t0 = time.perf_counter()
        fn(rows)
        batch = max(1, int(0.002 / max(time.perf_counter() - t0, 1e-6)))
        times, t0 = [], time.perf_counter()
        while time.perf_counter() - t0 < budget or len(times) < 3:
            t1 = time.perf_counter()
            for _ in range(batch):
                fn(rows)
            times.append((time.perf_counter() - t1) / batch)
        return n_params * rows / sorted(times)[len(times) // 2]

    xs = {rows: rng.standard_normal((rows, 1024), dtype=np.float32) for rows in (1, 16)}
    w = rng.standard_normal((4096, 1024), dtype=np.float32)         # 16 MiB
    small = rng.standard_normal((2048, 1024), dtype=np.float32)[:, :640]      # 5 MiB: a small model's FFN matrix
    small = np.ascontiguousarray(small)
    xsm = {rows: x[:, :640].copy() for rows, x in xs.items()}
    kinds = sorted(cpu_kernel_types() - {"F16"})          # F16 is placed as F32
    share = seconds * 0.8 / (2 * (len(kinds) + 4))
    out = {"numpy": {f"t{r}": rate(lambda r: _linear(xs[r], w), w.size, r, share) for r in (1, 16)},
           "numpy_small": {f"t{r}": rate(lambda r: _linear(xsm[r], small), small.size, r, share) for r in (1, 16)}}
    # the non-product work of one attention layer (norms, RoPE, attention over 64 keys, the gate, the adds) at a
    # small model's sizes: hidden 640, 8 heads and 2 KV heads of 64, FFN 2048
    inv = rope_inv_freq(64, 10000.0)
    gain = np.ones(640, np.float32)

    def layer(rows):
        x = xsm[rows]
        pos = np.arange(64, 64 + rows)
        h = rms_norm(x, gain, 1e-5)
        q = rope_neox(h[:, :512].reshape(rows, 8, 64), pos, inv)
        k = rope_neox(h[:, :128].reshape(rows, 2, 64), pos, inv)
        keys = np.concatenate([np.ones((64, 2, 64), np.float32), k])
        a = _causal_gqa(q, keys, keys, pos, np.float32(0.125))
        x = x + a[:, :640] if a.shape[1] >= 640 else x + np.pad(a, ((0, 0), (0, 640 - a.shape[1])))
        g = np.tile(rms_norm(x, gain, 1e-5), (1, 4))[:, :2048]
        return x + (silu(g) * g)[:, :640]
    out["layer_s"] = {f"t{r}": r / rate(layer, 1, r, share) for r in (1, 16)}
    if kinds:
        from .models.cpu import make_kernels
        kernels = await make_kernels()
        for name in kinds if kernels is not None else ():
            t = GGMLType[name]
            elems, nbytes = GGML_BLOCK[t]
            raw = np.frombuffer(rng.bytes(1024 * 1024 // elems * nbytes), np.uint8) & np.uint8(0x3F)
            q = kernels.place(raw, t, 1024, 1024)
            out[name] = {f"t{r}": rate(lambda r: q.matmul(xs[r]), 1024 * 1024, r, share) for r in (1, 16)}
        if kernels is not None and "Q4_K" in out:   # a matrix past the caches: 4096 x 4096 Q4_K (9.4 MB)
            elems, nbytes = GGML_BLOCK[GGMLType.Q4_K]
            raw = np.frombuffer(rng.bytes(4096 * 4096 // elems * nbytes), np.uint8) & np.uint8(0x3F)
            q = kernels.place(raw, GGMLType.Q4_K, 4096, 4096)
            xb = {r: np.tile(x, (1, 4)) for r, x in xs.items()}
            out["big_ratio"] = {f"t{r}": rate(lambda r: q.matmul(xb[r]), 4096 * 4096, r, share) / out["Q4_K"][f"t{r}"]
                                for r in (1, 16)}
        if kernels is not None:          # the fixed cost of one kernel call: a 32 x 256 Q8_0 product
            elems, nbytes = GGML_BLOCK[GGMLType.Q8_0]
            q = kernels.place(np.zeros(32 * 256 // elems * nbytes, np.uint8), GGMLType.Q8_0, 32, 256)
            xt = {r: x[:, :256].copy() for r, x in xs.items()}
            out["kcall_s"] = {f"t{r}": r / rate(lambda r: q.matmul(xt[r]), 1, r, share) for r in (1, 16)}
    tiny = rng.standard_normal((8, 8), dtype=np.float32)
    out["call_s"] = 1 / rate(lambda r: _linear(tiny[:1], tiny), 1, 1, seconds * 0.05)
    return out


_FMA_WGSL = """
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let seed = f32(wid.x * 256u + tid);
    var a = vec4<f32>(seed, seed + 1.0, seed + 2.0, seed + 3.0) * 1e-7;
    var b = vec4<f32>(0.5);
    for (var i = 0u; i < ITERS; i++) {
        a = fma(a, vec4<f32>(0.999), b);
        b = fma(b, vec4<f32>(0.999), a);
    }
    let v = bitcast<u32>(a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w);
    if (v == 0x9E3779B9u) { out[0] = v; }
}
"""

_DOT_WGSL = """
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    var x = wid.x * 2654435761u + tid;
    var a = 0i; var b = 1i; var c = 2i; var d = 3i;
    for (var i = 0u; i < ITERS; i++) {
        a += dot4I8Packed(x, 0x01020304u);
        b += dot4I8Packed(x ^ 0x55u, 0x04030201u);
        c += dot4I8Packed(x + 1u, 0x7f7f7f7fu);
        d += dot4I8Packed(x, bitcast<u32>(a));
        x = x * 1664525u + 1013904223u;
    }
    let v = bitcast<u32>(a ^ b ^ c ^ d);
    if (v == 0x9E3779B9u) { out[0] = v; }
}
"""


async def gpu_microbench(dev, target_s: float = 0.1) -> dict:
    """About ``target_s`` of timing on a cera_web.gpu device: {read_bps (bytes a second read by a vec4 kernel),
    dispatch_s (one dispatch of a chain in one submit), fma_flops, int8_ops (None without dot4I8Packed), matvec_bps
    (the decode kernel, matmul.wgsl, on a Q4_K matrix)}. Buffers are released before it returns."""
    import numpy as np
    from . import kernels
    from .gguf import GGMLType
    made = []

    def buf(n, kind="storage"):
        b = dev.create_buffer(n, kind=kind, label="microbench")
        made.append(b)
        return b

    sink = buf(16)

    async def run(plan) -> float:
        t0 = time.perf_counter()
        dev.submit([plan])
        await dev.read(sink, 0, 4)
        return time.perf_counter() - t0

    async def timed(dispatches, budget) -> float:
        plan = dev.record(dispatches)
        await run(plan)            # warm-up (pipeline compile)
        best, spent = math.inf, 0.0
        while spent < budget or best is math.inf:
            t = await run(plan)
            best, spent = min(best, t), spent + t
            if spent > budget * 4:
                break
        return best

    async def per_unit(make, n1, n2, budget) -> float:
        """The time one more unit of work adds: (best time of make(n2) - best of make(n1)) / (n2 - n1), n2 grown
        fourfold (to 64 * n2 at most) until the difference is PER_UNIT_SPAN. GPUs: a run's fixed costs (submit,
        readback: milliseconds in a browser, and varying) cancel, which a subtraction of an empty run's best time
        left in the result (the page on the H200, session 17: twice the dispatch time, and bandwidths or operation
        rates off by up to 10^6 where the work was shorter than the readback's jitter)."""
        t1 = await timed(make(n1), budget / 2)
        t2 = await timed(make(n2), budget / 2)
        for _ in range(3):
            if t2 - t1 >= PER_UNIT_SPAN:
                break
            n2 *= 4
            t2 = await timed(make(n2), budget / 2)
        return max(t2 - t1, 1e-9) / (n2 - n1)

    async def dispatch_time(d) -> float:
        """One dispatch d's time: software adapters, a run of it less an empty run; GPUs, per_unit over 1 and 5."""
        if soft:
            return max(await timed([d], share) - empty, 1e-9)
        return await per_unit(lambda n: [d] * n, 1, 5, share)

    share = target_s / 5
    soft = dev.is_cpu
    try:
        empty = await timed([], share / 4)
        # read bandwidth: bench_read over a buffer (64 MiB on GPUs, 4 MiB on software adapters)
        nbytes = (4 if soft else 64) << 20
        data = buf(nbytes)
        groups = 64 if soft else 2048
        read = dev.pipeline(kernels.build("bench_read", N4=nbytes // 16, THREADS=groups * 256), "bench_read")
        rd = (read, dev.bind(read, [data, sink]), kernels.spread(groups))
        if soft:
            t = await timed([rd] * 4, share)
            read_bps = 4 * nbytes / max(t - empty, 1e-9)
        else:
            await timed([rd] * 64, share / 2)      # a GPU idle at low clocks ramps up first (~10 ms of reads)
            read_bps = nbytes / await per_unit(lambda n: [rd] * n, 4, 68, share)
        # the time of a dependent dispatch: a chain of one-workgroup reads in one submit
        tiny = dev.pipeline(kernels.build("bench_read", N4=16, THREADS=256), "bench_read tiny")
        bound = dev.bind(tiny, [data, sink])
        n = 64
        t = await timed([(tiny, bound, (1, 1, 1))] * n, share)
        dispatch_s = max(t - empty, 1e-9) / n
        # float32 multiply-adds, int8 dot products
        groups = 8 if soft else 4096
        iters = 64 if soft else 1024
        fma = dev.pipeline(f"const ITERS: u32 = {iters}u;\n" + _FMA_WGSL, "bench fma")
        fma_flops = groups * 256 * iters * 16 / await dispatch_time((fma, dev.bind(fma, [sink]), (groups, 1, 1)))
        int8_ops = None
        if dev.int8_dot:
            dot = dev.pipeline(f"{kernels.REQUIRES_I8}\nconst ITERS: u32 = {iters}u;\n" + _DOT_WGSL, "bench dot4")
            int8_ops = groups * 256 * iters * 32 / await dispatch_time((dot, dev.bind(dot, [sink]), (groups, 1, 1)))
        # the decode kernel on a Q4_K matrix (the commonest weight type of Q4_K_M files)
        N, K = (256, 1024) if soft else (4096, 4096)
        fmt = GGMLType.Q4_K
        wbytes = N * K // 256 * 144
        w = buf(wbytes)
        rng = np.random.default_rng(0)
        dev.write_buffer(w, np.frombuffer(rng.bytes(wbytes), np.uint8) & np.uint8(0x3F))
        x = buf(4 * K)
        dev.write_buffer(x, rng.standard_normal(K).astype(np.float32))
        gain = buf(4 * K)
        dev.write_buffer(gain, np.ones(K, np.float32))
        step = buf(16, "uniform")
        dev.write_buffer(step, struct.pack("<4I", 1, 0, 0, 1))
        y = buf(4 * N)
        shape = kernels.matvec_shape(K // kernels.block_elems(fmt), 1, dev.is_cpu, dev.subgroup_size)
        shape["sg"] = bool(shape["sg"]) and (dev.subgroup_size or 0) >= shape["lanes"]
        mv = dev.pipeline(kernels.matmul(fmt, K, N, **shape), "bench matvec")
        grid = kernels.spread(kernels.matmul_groups(N, shape["lanes"], shape["rpt"], shape["wg"]))
        md = (mv, dev.bind(mv, [w, x, y, step, gain]), grid)
        if soft:
            reps = 2
            t = await timed([md] * reps, share)
            matvec_bps = reps * wbytes / max(t - empty - reps * dispatch_s, t / 4)
        else:
            matvec_bps = wbytes / await per_unit(lambda n: [md] * n, 4, 68, share)
            # a dependent dispatch as decode chains them: a small product (1024 x 1024), 256 more in the chain
            n1 = 1024
            sh1 = kernels.matvec_shape(n1 // kernels.block_elems(fmt), 1, dev.is_cpu, dev.subgroup_size)
            sh1["sg"] = bool(sh1["sg"]) and (dev.subgroup_size or 0) >= sh1["lanes"]
            small = dev.pipeline(kernels.matmul(fmt, n1, n1, **sh1), "bench matvec 1024")
            g1 = kernels.spread(kernels.matmul_groups(n1, sh1["lanes"], sh1["rpt"], sh1["wg"]))
            sd = (small, dev.bind(small, [w, x, y, step, gain]), g1)
            dispatch_s = await per_unit(lambda n: [sd] * n, 16, 272, share)
    finally:
        for b in made:
            dev.release(b)
    return {"read_bps": read_bps, "dispatch_s": dispatch_s, "fma_flops": fma_flops, "int8_ops": int8_ops,
            "matvec_bps": matvec_bps, "is_cpu": bool(dev.is_cpu), "browser": bool(dev.in_browser)}


async def probe_memory(dev, nbytes: int) -> dict:
    """Whether the device can allocate ``nbytes`` (at most PROBE_CAP) now: buffers of at most maxBufferSize are
    created up to that total, the device is asked (settle: the browser's out-of-memory and validation scopes), and
    every one is destroyed at once, whatever the answer. Nothing is written to them (browsers and drivers commit
    memory lazily, so a yes is an upper bound of what the model may get; a no is certain). Returns {bytes, ok,
    error}."""
    nbytes = min(int(nbytes), PROBE_CAP)
    piece = max(1 << 20, int(dev.limits.get("max-buffer-size", 1 << 28)) // 4 * 4)
    made, error = [], None
    try:
        left = nbytes
        while left > 0:
            made.append(dev.create_buffer(min(piece, left), label="memory probe"))
            left -= piece
        await dev.settle()
    except CeraError as e:
        error = str(e).split(":")[0]
    except Exception as e:          # a native allocation failure (wgpu raises its own type)
        error = str(e).splitlines()[0] if str(e) else type(e).__name__
    finally:
        for b in made:
            try:
                dev.release(b)
            except Exception:
                pass
    return {"bytes": nbytes, "ok": error is None, "error": error}


# -- speed -------------------------------------------------------------------------------------------------------

def estimate(spec, costs: dict, backend: str, bench: dict | None, chunk: int = 512, position: int = 64) -> dict:
    """Tokens a second expected for decode and for prefill (a 128-token prompt), from a micro-benchmark of where
    the model runs (cpu_microbench on the CPU path, gpu_microbench on a GPU device); {} without one.

    The CPU path: a decode step is its matrix products at the one-token rate plus per-layer numpy calls; prefill
    the products at the chunk rate. GPUs: a decode step is its dispatch chain plus its bytes at the decode kernel's
    rate (software adapters: the matrix-vector kernel's; GPUs: the read bandwidth's); prefill its operations at
    the int8 dot rate (or float32 multiply-adds), at the efficiency the engine's GEMMs reach, plus the chain of a
    chunk's dispatches over its tokens. position: the KV rows a decode step reads."""
    if not bench:
        return {}
    kv_row = spec.kv_bytes(1, "f32")[1]
    if backend == "cpu":
        if "numpy" not in bench:
            return {}
        big = 4 * spec.hidden * spec.ffn > 8 << 20          # float32 matrices past a CPU cache: the 16 MiB rate
        out = {}
        for key, rows in (("t1", 1), ("t16", 16)):
            t = 0.0
            for name, n in costs["matrix_by_type"].items():
                r = bench.get(name) or bench["numpy" if big else "numpy_small"]   # no kernel: float32 numpy
                n_big = costs["big_by_type"].get(name, 0) if name in bench else 0
                t += (n - n_big) / r[key] + n_big / (r[key] * min(bench.get("big_ratio", {}).get(key, 1.0), 1.0))
            kcall = bench.get("kcall_s", {}).get(key, bench["call_s"] * rows)
            t += costs["matrices"] * kcall / rows + spec.n_layers * bench["layer_s"][key] / rows
            out[key] = t
        decode = out["t1"] * CPU_DECODE_FACTOR
        prefill = out["t16"] * CPU_PREFILL_FACTOR
    else:
        if "read_bps" not in bench:
            return {}
        nbytes = costs["decode_bytes"] + kv_row * position
        if bench.get("is_cpu"):
            decode = costs["dispatches"] * bench["dispatch_s"] + nbytes / bench["matvec_bps"] * SOFT_DECODE_FACTOR
            prefill = decode * SOFT_PREFILL_FACTOR       # software adapters' prefill kernels loop over tokens
        else:
            chain = BROWSER_DECODE_CHAIN if bench.get("browser") else GPU_CHAIN_FACTOR
            decode = costs["dispatches"] * bench["dispatch_s"] * chain + nbytes * GPU_READ_FACTOR / bench["read_bps"]
            ops = bench.get("int8_ops") or bench["fma_flops"]
            eff = BROWSER_GEMM_EFFICIENCY if bench.get("browser") else GPU_GEMM_EFFICIENCY
            prefill = costs["flops"] / (ops * eff) + \
                costs["dispatches"] * bench["dispatch_s"] * GPU_PREFILL_CHAIN / min(chunk, 128)
    return {"decode_tok_s": float(f"{1 / decode:.3g}"), "prefill_tok_s": float(f"{1 / prefill:.3g}")}


# Calibration (BENCHMARKS.md "Preflight estimates"): measured / micro-benchmark-only prediction, per path.
CPU_DECODE_FACTOR = 1.2
CPU_PREFILL_FACTOR = 0.85
SOFT_DECODE_FACTOR = 1.0
SOFT_PREFILL_FACTOR = 0.85
# GPUs, fitted on the H200 (session 17: docs/bench/h200-s17-page4-estimate.jsonl, five models in the page and
# natively with this micro-benchmark, and the native rows of -page3-; BENCHMARKS.md "Preflight estimates"):
GPU_CHAIN_FACTOR = 0.94        # a native decode step's dispatches cost about the micro-benchmark's dependent chain
BROWSER_DECODE_CHAIN = 0.71    # ... in a browser 0.71 of it: there the chain's host work (encoding before the submit)
                               # counts in the micro-benchmark, and overlaps the GPU in decode's pipelined steps
GPU_READ_FACTOR = 1.46         # decode kernels read weights at 1 / 1.46 of the plain read kernel's bandwidth
GPU_GEMM_EFFICIENCY = 0.41     # native prefill GEMMs reach 0.41 of the int8 dot (or multiply-add) loop's rate
BROWSER_GEMM_EFFICIENCY = 0.17 # in a browser 0.17: the same loop compiled by Tint ran twice as fast as through
                               # wgpu's compiler on the H200, the GEMMs at the same speed
GPU_PREFILL_CHAIN = 3.2        # a 128-token prefill pass's fixed cost in dependent-dispatch times (H200: ~3 ms a pass)
PER_UNIT_SPAN = 0.008          # gpu_microbench: seconds of measured work a per-unit time needs (jitter: ~1 ms)


# -- the report ----------------------------------------------------------------------------------------------------

def choose_backend(gguf, is_cpu: bool, backend: str = "auto") -> str:
    """The backend a load will run on: loading.choose_backend's answer for a device that is (or is not) a CPU."""
    from types import SimpleNamespace
    from .loading import choose_backend as rule
    return rule(backend, SimpleNamespace(is_cpu=is_cpu), gguf)


def preflight(gguf, file_size: int, *, limits: dict | None = None, features=(), is_cpu: bool = False,
              adapter: str = "", backend: str = "auto", context: int | None = None, kv_cache: str | None = None,
              bench: dict | None = None, cpu_bench: dict | None = None, probe: dict | None = None,
              quota: dict | None = None, spec=None) -> dict:
    """Everything the page and ``info --fit`` show before a download, as one JSON-ready dict: the model (name,
    architecture, parameters, tensor types, file size, trained context), where it would run, the memory it needs
    at the context (f32 and f16 cache), whether it fits (limits, the probe, the storage quota), the context and
    cache a load would take (auto_fit), and the speed estimate. limits/features/is_cpu/adapter: the device's
    (limits None: no GPU); probe: probe_memory's answer; quota: {usage, quota} from navigator.storage.estimate."""
    spec = spec or model_spec(gguf)
    costs = model_costs(gguf, spec)
    costs["cpu_kernel_types"] = cpu_kernel_types()
    where = "cpu" if limits is None else choose_backend(gguf, is_cpu, backend)
    chunk = 16 if where == "cpu" else (64 if is_cpu else 512)
    ctx = context or CONTEXT_SIZE
    budget = HEAP_BYTES if where == "cpu" else (probe["bytes"] if probe and probe.get("ok") is False else None)
    report = {
        "name": gguf.metadata.get("general.name") or "", "architecture": spec.arch, "params": costs["params"],
        "file_size": int(file_size), "weights": costs["weights"], "types": costs["types"],
        "context_train": spec.context_train, "backend": where, "adapter": adapter, "context": ctx,
        "decode_bytes": costs["decode_bytes"], "flops_per_token": costs["flops"], "dispatches": costs["dispatches"],
        "memory": {kv: memory_need(spec, costs, ctx, kv, where, chunk) for kv in KV_WIDTH},
        "shader_f16": "shader-f16" in features,
    }
    limit_error = None
    if where == "webgpu" and limits is not None:
        try:
            fit_report(gguf, limits, 1, spec=spec)      # the tensors; the KV cache is auto_fit's
        except UnsupportedModelError as e:
            limit_error = str(e)
    report["limits"] = None if limits is None else {"buffer": _binding(limits), "error": limit_error}
    report["max_context"] = {kv: max_context(spec, costs, limits if where == "webgpu" else None, kv, where, chunk,
                                             budget) for kv in KV_WIDTH}
    report["probe"] = probe
    if quota and quota.get("quota"):
        free = int(quota["quota"]) - int(quota.get("usage", 0))
        report["storage"] = {"free": free, "fits": int(file_size) <= free}
    else:
        report["storage"] = None
    try:
        if limit_error:
            raise UnsupportedModelError(limit_error)
        report["fit"] = auto_fit(spec, costs, limits=limits if where == "webgpu" else None, features=features,
                                 backend=where, chunk=chunk, budget=budget, context=context, kv_cache=kv_cache)
        report["refused"] = None
    except UnsupportedModelError as e:
        report["fit"] = None
        report["refused"] = str(e)
    report["estimate"] = estimate(spec, costs, where, cpu_bench if where == "cpu" else bench, chunk)
    return report


def _mb(n) -> str:
    return f"{n / 1e6:,.1f} MB"


def summary(report: dict) -> str:
    """One line for the model menu: fits / does not, the memory at the context, the speed."""
    if report.get("refused"):
        return "does not fit here"
    fit = report["fit"]
    mem = report["memory"][fit["kv_cache"]]["total"]
    est = report.get("estimate") or {}
    speed = f" · ~{est['decode_tok_s']:.3g} tok/s" if est.get("decode_tok_s") else ""
    ok = "fits" if fit["fits"] else f"fits at {fit.get('offer')} tokens"
    room = " · no room to cache it" if report.get("storage") and not report["storage"]["fits"] else ""
    return f"{ok} · {_mb(mem)}{speed}{room}"


def describe(report: dict) -> list[str]:
    """The report as lines of text (info --fit, the page's preflight panel)."""
    t = ", ".join(f"{k} ×{v['tensors']} ({_mb(v['bytes'])})" for k, v in report["types"].items())
    lines = [f"parameters: {report['params'] / 1e6:,.1f} M   file: {_mb(report['file_size'])}   weights: "
             f"{_mb(report['weights'])}   trained context: {report['context_train']}",
             f"tensor types: {t}",
             f"runs on: {'the CPU path (numpy)' if report['backend'] == 'cpu' else 'WebGPU'}"
             + (f" ({report['adapter']})" if report.get("adapter") else "")]
    ctx = report["context"]
    for kv, m in report["memory"].items():
        lines.append(f"memory at {ctx} tokens ({kv} KV cache): {_mb(m['total'])} = weights {_mb(m['weights'])} + KV "
                     f"{_mb(m['kv_cache'])} + scratch {_mb(m['scratch'])}; largest context that fits: "
                     f"{report['max_context'][kv]:,}")
    lim = report.get("limits")
    if lim:
        lines.append(f"buffer limits: {'no: ' + lim['error'] if lim['error'] else 'yes'} (binding {_mb(lim['buffer'])})")
    p = report.get("probe")
    if p:
        lines.append(f"probe allocation of {_mb(p['bytes'])}: {'yes (released)' if p['ok'] else 'no: ' + str(p['error'])}")
    elif report["backend"] == "webgpu":
        lines.append("total GPU memory: not checked (WebGPU reports none; no probe made)")
    s = report.get("storage")
    if s:
        lines.append(f"storage for caching: {'yes' if s['fits'] else 'no'} ({_mb(s['free'])} free)")
    if report.get("refused"):
        lines.append(f"refused: {report['refused']}")
    else:
        f = report["fit"]
        if f["fits"]:
            lines.append(f"fit: yes at {f['context']} tokens, {f['kv_cache']} KV cache"
                         + (f" (changed: {f['changed']})" if f.get("changed") else ""))
        else:
            lines.append(f"fit: no at {f['context']} tokens; the largest that fits: {f['offer']} ({f['offer_kv']} KV "
                         f"cache)")
    est = report.get("estimate")
    if est:
        lines.append(f"estimated speed here: decode ~{est['decode_tok_s']:,.3g} tok/s, prefill ~{est['prefill_tok_s']:,.3g} "
                     f"tok/s ({_mb(report['decode_bytes'])} and {report['flops_per_token'] / 1e9:.2f} GFLOP a token)")
    return lines
