"""Models: one ModelSpec per file (spec.py, the one registry of architectures), run by the GPU model
(transformer.py on base.py) or by the CPU fallback (cpu.py: the numpy reference model behind the same interface).

The Model interface the engine drives, implemented by both (the engine never asks which one it holds):

    spec, vocab, chunk, context_size     the model's ModelSpec; prompt tokens per prefill pass; KV cache positions
    kv_cache                             the KV cache's element type: "f32", or "f16" (values rounded to halves)
    prefill(ids, pos0, with_head)        run a prompt chunk at positions pos0...; with_head: sample its next token
    decode(pos, out_index)               one step: the last sampled token at pos; its successor into log[out_index]
    await read_log(n)                    the tokens of log[0:n] (waits for the submitted work)
    rewindable                           whether a pass may restart at any cached position (no running state)
    keep_state(step) -> bool             keep the state as after decode step ``step`` of the last read
    max_steps_per_read                   decode steps the engine may submit between two read_log calls
    passes                               forward passes run so far (the engine notices passes it did not run)
    make_sampler(); sampler_plan         the sampler for this model's head; set sampler_plan to sample, None: argmax
                                         (a sampler: set_params(params, seed, masked), set_history(ids),
                                         set_mask(words), await read_logprobs(n, top), plan; sampling.GPUSampler)
    encode_forward(out_index), send_forward(encoded, pos, out_index), encode_sample(out_index, reads)
                                         a decode step in halves, encoded ahead (GPU models only; the engine's
                                         overlapped constrained decode uses them when present)
    on_gpu                               False for the CPU fallback (the numpy reference model)
    memory() -> dict | None              GPU bytes held (weights, kv_cache, other, total, buffers); None on the CPU
    split_tensors() -> dict              {tensor: [(buffer, first row, rows)]} of weights split across buffers
"""
from .spec import ARCHITECTURES, KV_WIDTH, ModelSpec, check_architecture, check_kv_cache, model_spec  # noqa: F401


def load_model(dev, gguf, source, *, context_size: int, chunk: int, on_progress=None, kv_cache: str = "f32"):
    """The model for parsed GGUF ``gguf``: its spec checked against the file first (before anything is allocated),
    then the GPU model on ``dev``, or the CPU fallback when ``dev`` is a models.cpu.CPUDevice. kv_cache: the KV
    cache's element type, "f32" or "f16" (half the memory; on GPUs it needs the shader-f16 feature)."""
    from ..errors import UnsupportedModelError
    check_kv_cache(kv_cache)
    from .cpu import CPUDevice, CPUModel
    spec = model_spec(gguf)
    if isinstance(dev, CPUDevice):
        cls = CPUModel
    else:
        from .memory import fit_report
        from .transformer import Transformer as cls
        if kv_cache == "f16" and "shader-f16" not in dev.features:
            raise UnsupportedModelError(
                "kv_cache='f16' needs the GPU's shader-f16 feature, which this device does not offer; use "
                "kv_cache='f32' (the default)")
        fit_report(gguf, dev.limits, context_size, spec=spec, kv_cache=kv_cache)   # refuse what cannot fit first
    return cls(dev, gguf, source, spec, context_size=context_size, chunk=chunk, on_progress=on_progress,
               kv_cache=kv_cache)


def model_class(arch: str):
    """A constructor ``(dev, gguf, source, *, context_size, chunk, on_progress=None)`` of the GPU model for GGUF
    architecture ``arch`` (UnsupportedModelError when there is none)."""
    check_architecture(arch)
    return lambda dev, gguf, source, **kw: load_model(dev, gguf, source, **kw)
