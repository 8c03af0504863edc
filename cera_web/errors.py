"""The errors cera_web raises. Each message says what is wrong and what to do about it."""


class CeraError(Exception):
    """Base class of every error cera_web raises on purpose."""


class GGUFFormatError(CeraError):
    """The file is not a valid GGUF file (bad magic, truncated, inconsistent header)."""


class UnsupportedModelError(CeraError):
    """A valid GGUF file that this engine cannot run (architecture, tensor type, shape)."""


class ContextOverflowError(CeraError):
    """The prompt or conversation does not fit in the context window."""


class GPUUnavailableError(CeraError):
    """No WebGPU adapter/device could be obtained, or the device was lost."""


class DeviceLostError(GPUUnavailableError):
    """The GPU device was lost under a loaded model (a driver reset, the system reclaiming GPU memory, a browser tab
    in the background): the running call stops with it; load the model again (a new device) to go on."""


class GPUMemoryError(CeraError):
    """The GPU could not allocate a buffer the model needs (out of memory, or over a device limit)."""


class DownloadError(CeraError):
    """The model's bytes could not be read from where they are (a server that stopped answering, or answers Range
    requests no more)."""


class InputError(CeraError):
    """Bad input from the caller (e.g. an empty prompt)."""


class SnapshotError(CeraError):
    """A state snapshot (cera_web.snapshot) that cannot be used here: another model, cache type or context, or
    damaged. Callers warn with its message and recompute the prompt."""
