"""The one load path: ``plan_load`` reads a model file's header and makes every decision of a load once.

    plan = await plan_load("model.gguf")       # header parsed, spec built, tokenizer made, device chosen, fit
                                               # checked: each once, before any weight is read
    engine = await Engine.from_plan(plan)      # the weights go up (models.load_model); nothing is re-derived

``Engine.load(source, ...)`` is those two lines. The page's worker (webapp.py) and the notebook call ``plan_load``
themselves, to pass in what they have already: a device made ahead (the page makes one before the download, to
check the header against its limits), the header checked from the download's first bytes (``check``, through
webapp.check_header), or the page's backend setting ("auto" | "webgpu" | "cpu").
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from .errors import GPUUnavailableError, InputError, UnsupportedModelError
from .gguf import GGUFFile, parse_gguf
from .models.memory import CONTEXT_SIZE, context_limit, fit_report, in_256s
from .models.spec import ModelSpec, check_kv_cache, model_spec
from .source import FileSource

BACKENDS = ("auto", "webgpu", "cpu")

# The CPU path keeps a model's weights packed in its WebAssembly kernels' memory where they multiply that type, as
# float32 arrays otherwise (cpu_weight_bytes): "auto" takes it on a software adapter for models whose weights there
# stay under this (SmolLM2-135M Q4_1: 96 MB, Qwen2.5-Coder-0.5B Q4_K_M: 485 MB; as float32 0.54 and 2.5 GB).
CPU_WEIGHT_BYTES = 1 << 30
IN_BROWSER = sys.platform == "emscripten"      # wasm32 (Pyodide): one memory of at most 4 GiB (check_wasm_heap)


@dataclass
class Header:
    """A model file's header, read and checked: the parsed GGUF, its spec, and its fit report against a device's
    limits (with the (limits, context_size, kv_cache) it was checked for; None when no limits were given)."""

    gguf: GGUFFile
    spec: ModelSpec
    fit: dict | None = None
    fit_for: tuple | None = None


def check(gguf: GGUFFile, limits: dict | None = None, context_size: int | None = CONTEXT_SIZE,
          kv_cache: str | None = "f32", features=()) -> Header:
    """Check a parsed header: the architecture and tensors (models.model_spec), and, given a device's limits, that
    its buffers fit them (models.memory.fit_report) at ``context_size`` (None: auto_context's) with ``kv_cache``
    (None: auto_kv_cache's, from the device's ``features``). Raises with what is wrong."""
    spec = model_spec(gguf)
    if limits is None:
        return Header(gguf, spec)
    if kv_cache is None:
        kv_cache = auto_kv_cache(spec, limits, features, context_size)
    if context_size is None:
        context_size = auto_context(spec, limits, kv_cache)
    return Header(gguf, spec, fit_report(gguf, limits, context_size, spec=spec, kv_cache=kv_cache),
                  (limits, context_size, kv_cache))


def auto_context(spec, limits: dict, kv_cache: str = "f32") -> int:
    """The context of a load that did not set one: CONTEXT_SIZE (2048), or less where the device's buffer limits
    cannot hold that much KV cache per layer: the most they hold, in 256s (models.memory.context_limit). Where they
    hold fewer than 256 tokens, CONTEXT_SIZE (the load is then refused with the numbers: too small to be useful)."""
    most = context_limit(spec, limits, kv_cache)
    return CONTEXT_SIZE if most < 256 else min(CONTEXT_SIZE, in_256s(most))


def auto_kv_cache(spec, limits: dict, features, context_size: int | None) -> str:
    """The KV cache type of a load that did not set one: "f16" where the device has shader-f16 and one layer's float32
    K or V buffer cannot hold the context (context_size, or CONTEXT_SIZE when unset) within the binding limit while
    halves hold more; else "f32" (the default: float32 logits, no speed lost)."""
    want = context_size or CONTEXT_SIZE
    if "shader-f16" not in features or context_limit(spec, limits, "f32") >= want:
        return "f32"
    return "f16" if context_limit(spec, limits, "f16") > context_limit(spec, limits, "f32") else "f32"


@dataclass
class LoadPlan:
    """Everything decided about a load before its weights are read: made once by plan_load, passed down as is."""

    source: object              # where the bytes come from (cera_web.source): name, size, read(offset, n)
    gguf: GGUFFile              # the parsed header: metadata and tensor table
    spec: ModelSpec             # the model's description, checked against the tensor table (models/spec.py)
    tokenizer: object           # cera_web.tokenizer.Tokenizer, checked against the embedding table
    backend: str                # where it runs: "webgpu" (a GPU device) or "cpu" (the numpy reference model)
    device: object              # the GPU device (cera_web.gpu), or a models.cpu.CPUDevice on the CPU path
    fit: dict | None            # models.memory.fit_report against the device's limits (None on the CPU path)
    context_size: int           # KV cache positions
    chunk: int                  # prompt tokens a prefill pass
    kv_cache: str               # the KV cache's element type: "f32" or "f16"

    @property
    def cpu(self) -> bool:
        """Whether the load runs the numpy reference model on the CPU (not a GPU device)."""
        return self.backend == "cpu"


def cpu_weight_bytes(gguf) -> int:
    """Bytes the CPU path holds a model's weights in: the types its WebAssembly kernels multiply stay packed (as in
    the file; F16 is widened), the rest are float32 (preflight.cpu_kernel_types)."""
    from .preflight import cpu_kernel_types
    packed = cpu_kernel_types() - {"F16"}
    return sum(t.nbytes if t.type.name in packed else 4 * t.n_elements for t in gguf.tensors.values())


def choose_backend(backend: str, device, gguf) -> str:
    """"cpu" or "webgpu" for a load: what was asked, except that "auto" takes the CPU path where the adapter is a
    software fallback (SwiftShader, or any adapter that says it is a CPU: on a 2-core box its WebGPU decodes SmolLM2
    ~60x slower than the CPU path, Qwen2.5-Coder-0.5B ~50x) and the CPU path holds the weights in CPU_WEIGHT_BYTES
    (cpu_weight_bytes: packed where its kernels run)."""
    if backend == "cpu" or device is None:
        return "cpu"
    if backend == "auto" and device.is_cpu and cpu_weight_bytes(gguf) <= CPU_WEIGHT_BYTES:
        return "cpu"
    return "webgpu"


def check_wasm_heap(gguf) -> None:
    """In the browser (wasm32: one memory of at most 4 GiB), refuse a CPU load whose weights cannot fit it, before
    anything is read: a model past 4 GB runs only on the GPU there. Natively there is no such bound."""
    from .preflight import HEAP_BYTES
    need = cpu_weight_bytes(gguf)
    if IN_BROWSER and need > HEAP_BYTES:
        raise UnsupportedModelError(
            f"this model's weights take {need / 1e9:.2f} GB on the CPU path, more than the {HEAP_BYTES / 1e9:.1f} GB "
            f"the browser's WebAssembly memory holds: load it on the GPU (backend 'webgpu' or 'auto')")


def read_header(source) -> GGUFFile:
    """Parse the GGUF header of ``source`` (cera_web.source: name, size, read)."""
    return parse_gguf(source.read, source.size, name=getattr(source, "name", None))


async def plan_load(source, *, device=None, backend: str = "webgpu", cpu_fallback: bool = True,
                    context_size: int | None = None, chunk: int | None = None, kv_cache: str | None = "f32",
                    header: Header | None = None, on_progress=None) -> LoadPlan:
    """Read and check a model's header, choose where it runs and check that it fits there; nothing is uploaded.

    source: a path or a source object. header: its Header when the caller read and checked it already (from the
    first bytes of its download: check()), else it is read here. device: a cera_web.gpu device, "cpu" for the numpy reference
    model, or None for the best GPU where this code runs: without one, the CPU (a message on stderr) unless
    cpu_fallback is False (GPUUnavailableError). backend: "webgpu" (the device, whatever it is), "cpu", or "auto"
    (choose_backend: the CPU where the device is a software adapter and the model is small enough); a device passed
    in that the load does not use is released. chunk: prompt tokens a prefill pass (default: the device's
    prefill_chunk). context_size None (not set): auto_context's (2048, or on a GPU whose buffer limits cannot hold
    that much KV cache per layer, the most they hold). kv_cache None (not set): "f32", or "f16" where the device
    has shader-f16 and the float32 cache does not reach the context (asked for, or CONTEXT_SIZE when unset) while
    halves hold more (auto_kv_cache). Raises InputError / UnsupportedModelError / GGUFFormatError with what is wrong, before any
    weight is read."""
    auto_kv = kv_cache is None
    check_kv_cache(kv_cache or "f32")
    kv_cache = kv_cache or "f32"
    if backend not in BACKENDS:
        raise InputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if not hasattr(source, "read"):
        source = FileSource(source)
    if on_progress:
        on_progress("parse", 0, 1)
    if header is None:
        gguf = read_header(source)
    else:
        gguf = header.gguf
    from .tokenizer import Tokenizer
    tokenizer = Tokenizer.from_gguf(gguf)
    if header is None:
        header = check(gguf)        # the architecture and its tensors check out before a device is made
    spec = header.spec
    auto = context_size is None
    context_size = CONTEXT_SIZE if auto else context_size
    if context_size < 1:
        raise InputError(f"context_size must be positive, got {context_size}")
    emb = gguf.tensors.get("token_embd.weight")
    n_rows = emb.shape[1] if emb is not None and len(emb.shape) == 2 else None   # other shapes: the model says
    if n_rows is not None and n_rows != tokenizer.vocab_size:
        raise UnsupportedModelError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the embedding table has {n_rows} rows: the "
            f"file's vocabulary and weights disagree; re-convert the model")
    backend, device, made = await _choose_device(device, backend, cpu_fallback, gguf)
    try:
        fit = None
        if backend == "webgpu":
            if auto_kv:
                kv_cache = auto_kv_cache(spec, device.limits, device.features, None if auto else context_size)
            if kv_cache == "f16" and "shader-f16" not in device.features:
                raise UnsupportedModelError(
                    "kv_cache='f16' needs the GPU's shader-f16 feature, which this device does not offer; use "
                    "kv_cache='f32' (the default)")
            if auto:
                context_size = auto_context(spec, device.limits, kv_cache)
            fit = header.fit if header.fit_for == (device.limits, context_size, kv_cache) else \
                fit_report(gguf, device.limits, context_size, spec=spec, kv_cache=kv_cache)   # refuse what cannot fit
    except BaseException:
        if made:
            device.destroy()
        raise
    chunk = max(1, min(device.prefill_chunk if chunk is None else chunk, context_size))
    return LoadPlan(source, gguf, spec, tokenizer, backend, device, fit, context_size, chunk, kv_cache)


async def _choose_device(device, backend: str, cpu_fallback: bool, gguf):
    """(backend, the device a load runs on, whether it was made here): the one place a load's device is chosen."""
    from .models.cpu import CPUDevice
    if device == "cpu":
        device, backend = None, "cpu"
    made = False
    if device is None and backend != "cpu":
        from .gpu import get_device
        try:
            device, made = await get_device(), True
        except GPUUnavailableError as e:
            if not cpu_fallback:
                raise
            print(f"cera_web: {e}; running on the CPU instead (slow)", file=sys.stderr)
    if choose_backend(backend, device, gguf) == "cpu":
        if device is not None:          # made for a GPU load (the page's prepare, or here) but not used
            device.destroy()
        check_wasm_heap(gguf)
        return "cpu", CPUDevice(), False
    return "webgpu", device, made
