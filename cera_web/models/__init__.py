"""Architectures: GGUF ``general.architecture`` -> the GPU model class that runs it."""
from ..errors import UnsupportedModelError


def model_class(arch: str):
    from .llama import LlamaModel
    classes = {"llama": LlamaModel}
    try:
        return classes[arch]
    except KeyError:
        raise UnsupportedModelError(
            f"architecture {arch!r} is not supported (supported: {', '.join(sorted(classes))})") from None
