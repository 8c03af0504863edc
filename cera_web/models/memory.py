"""GPU memory, before and after loading: will a model fit the device's buffer limits (fit_report, from its spec and
tensor table, before anything is uploaded), and what does a loaded model hold (gpu_memory)."""
from __future__ import annotations

from ..errors import UnsupportedModelError
from .spec import model_spec

CONTEXT_SIZE = 2048                     # tokens of KV cache the pages load models with
SPLIT_ROWS = 16     # a tensor split across buffers is split at multiples of this many rows (see GPUModel.pieces)


def smallest_piece(info) -> int:
    """The fewest bytes a buffer holding part of tensor ``info`` needs: SPLIT_ROWS of its rows (all of it when it has
    no more, or is 1-D: a vector is not split)."""
    rows = info.shape[-1] if len(info.shape) > 1 else 1
    return min(info.nbytes, info.nbytes // rows * SPLIT_ROWS)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def fit_report(gguf, limits: dict, context_size: int = CONTEXT_SIZE, spec=None, kv_cache: str = "f32") -> dict:
    """What a model needs on the GPU, checked against the device's limits before anything is uploaded.

    A kernel binds each buffer whole, so no buffer may exceed maxStorageBufferBindingSize (nor maxBufferSize). A
    weight larger than that (usually the token embedding or the LM head) is split into row ranges of its own
    buffers (models/base.py pieces), which needs only SPLIT_ROWS of its rows to fit; one layer's K or V cache must
    fit whole. Raises UnsupportedModelError with the bytes needed and available when something cannot fit (or when
    the file's spec does not check out: models/spec.py); else returns {weights, kv_cache, largest_tensor,
    largest_bytes, buffer_limit, split} (bytes; split: the names of the tensors that will be split). WebGPU does not
    say how much memory a GPU has in all, so the total is reported, not checked: the browser reports a failed
    allocation at upload. spec: the file's ModelSpec when the caller has it (else read here); kv_cache: "f32" or
    "f16", the KV cache's element type."""
    spec = spec or model_spec(gguf)
    binding = int(limits.get("max-storage-buffer-binding-size", 1 << 27))
    max_buffer = int(limits.get("max-buffer-size", 1 << 28))
    cap = min(binding, max_buffer)
    limit_name = "maxStorageBufferBindingSize" if binding <= max_buffer else "maxBufferSize"
    tensors = list(gguf.tensors.values())
    largest = max(tensors, key=lambda t: t.nbytes, default=None)
    kv_layer, kv_total = spec.kv_bytes(context_size, kv_cache)

    worst = max(tensors, key=smallest_piece, default=None)
    need = smallest_piece(worst) if worst is not None else 0
    if need > cap:
        piece = f"{SPLIT_ROWS} of its rows" if len(worst.shape) > 1 else "a vector cannot be split"
        raise UnsupportedModelError(
            f"tensor {worst.name!r} ({worst.type.name}, shape {list(worst.shape)}) needs a GPU buffer of at least "
            f"{_mib(need)} ({piece}), but this GPU binds at most {_mib(cap)} at once ({limit_name} = {cap} bytes): "
            f"needed {need} bytes, available {cap}. Use a smaller model, or a browser or GPU with a larger "
            f"{limit_name}")
    split = [t.name for t in tensors if t.nbytes > cap]
    report = {"weights": sum(t.nbytes for t in tensors), "kv_cache": kv_total,
              "largest_tensor": largest.name if largest else None, "largest_bytes": largest.nbytes if largest else 0,
              "buffer_limit": cap, "split": split}
    if kv_layer > cap:
        raise UnsupportedModelError(
            f"one layer's KV cache for {context_size} tokens needs a GPU buffer of {_mib(kv_layer)}, but this GPU "
            f"binds at most {_mib(cap)} at once ({limit_name} = {cap} bytes): needed {kv_layer} bytes, available "
            f"{cap}; load it with a smaller context size")
    return report


def context_limit(spec, limits: dict, kv_cache: str = "f32") -> int:
    """The most tokens of context whose one-layer K or V buffer fits the device's binding limit (what fit_report
    checks), whatever the model was trained for."""
    cap = min(int(limits.get("max-storage-buffer-binding-size", 1 << 27)), int(limits.get("max-buffer-size", 1 << 28)))
    per_token = spec.kv_bytes(1, kv_cache)[0]
    return cap // per_token if per_token else 1 << 30


def in_256s(n: int) -> int:
    """n rounded down to a multiple of 256, from 256 up (a smaller n as it is)."""
    return n - n % 256 if n >= 256 else n


def largest_context(spec, limits: dict, kv_cache: str = "f32") -> int:
    """The largest context to offer when the one asked for does not fit: context_limit at most the model's trained
    context, in 256s."""
    return in_256s(min(context_limit(spec, limits, kv_cache), spec.context_train))


def gpu_memory(model) -> dict:
    """Bytes of GPU memory a loaded GPU model holds: {weights, kv_cache, other, total, buffers} (ints). Weights are
    the packed tensors, kv_cache the K/V buffers, other the rest of the device's live buffers (activations, logits,
    norms, sampling)."""
    weights = {id(b): int(b.size) for b in model.weights.values()}
    kv = {id(b): int(b.size) for b in model.kv_buffers()}
    live = list(model.dev.live_buffers)
    other = sum(int(b.size) for b in live if id(b) not in weights and id(b) not in kv)
    w, k = sum(weights.values()), sum(kv.values())
    return {"weights": w, "kv_cache": k, "other": other, "total": w + k + other, "buffers": len(live)}
