"""Architectures: GGUF ``general.architecture`` -> the GPU model class that runs it."""
from ..errors import UnsupportedModelError


def model_class(arch: str):
    from .lfm2 import Lfm2Model
    from .llama import LlamaModel
    from .qwen import Qwen2Model, Qwen3Model
    classes = {"llama": LlamaModel, "qwen2": Qwen2Model, "qwen3": Qwen3Model, "lfm2": Lfm2Model}
    try:
        return classes[arch]
    except KeyError:
        raise UnsupportedModelError(
            f"architecture {arch!r} is not supported (supported: {', '.join(sorted(classes))})") from None
