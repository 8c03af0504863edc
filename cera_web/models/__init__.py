"""Models: one ModelSpec per file (spec.py, the one registry of architectures), run by the GPU model
(transformer.py on base.py) or by the CPU fallback (cpu.py: the numpy reference model behind the same interface).

The engine drives either through the Model protocol (models/base.py; tests/test_model_protocol.py checks both
against it), and never asks which one it holds. load_model builds the one a load plan (cera_web.loading.plan_load)
chose.
"""
from .spec import ARCHITECTURES, KV_WIDTH, ModelSpec, check_architecture, check_kv_cache, model_spec  # noqa: F401


async def load_model(plan, on_progress=None):
    """The Model of a load that cera_web.loading.plan_load decided (header, spec, device and fit all checked
    there, nothing re-derived here): the numpy reference model on the CPU path, else the GPU model on its device,
    its weights uploaded (on_progress(stage, done, total) as they go). A failed allocation (out of memory: a
    GPUMemoryError naming the buffer) frees every buffer this load made first, so the device holds what it held
    before (a model loaded on it before goes on working)."""
    if plan.cpu:
        from .cpu import CPUModel, make_kernels
        return CPUModel(plan.device, plan.gguf, plan.source, plan.spec, context_size=plan.context_size,
                        chunk=plan.chunk, on_progress=on_progress, kv_cache=plan.kv_cache,
                        kernels=await make_kernels())
    from .transformer import Transformer
    dev = plan.device
    held = {id(b): b for b in dev.live_buffers}
    try:
        model = Transformer(dev, plan.gguf, plan.source, plan.spec, context_size=plan.context_size,
                            chunk=plan.chunk, on_progress=on_progress, kv_cache=plan.kv_cache)
        await dev.settle()
        return model
    except BaseException:
        for buf in [b for b in list(dev.live_buffers) if id(b) not in held]:
            dev.release(buf)
        raise
