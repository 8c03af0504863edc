"""One small device interface over WebGPU, with two backends chosen by where the code runs.

- in Pyodide (``sys.platform == "emscripten"``): :mod:`cera_web.gpu.browser`, which drives ``navigator.gpu``;
- in CPython: :mod:`cera_web.gpu.native`, which drives the same WGSL through ``wgpu`` (wgpu-py, Vulkan/Metal/DX12).

Both backends expose the same methods (see :class:`Device`); models and the engine only talk to this interface.
Buffers, pipelines and bind groups are the backend's own objects, passed back to it opaquely.
"""
from __future__ import annotations

import sys

IN_BROWSER = sys.platform == "emscripten"


class Device:
    """The interface both backends implement (documentation; backends subclass it)."""

    name: str = "?"                    # adapter description, e.g. "NVIDIA H200 (Vulkan)"
    limits: dict                       # the device's limits (requested at the adapter's maximum)
    features: set                      # e.g. {"shader-f16", "subgroups", "timestamp-query"}
    calls: int = 0                     # host→GPU API calls made (the browser backend counts JS calls)
    dispatches: int = 0                # compute dispatches submitted
    submits: int = 0                   # queue submissions
    live_buffers: object               # the buffers created and not yet released (for leak checks)
    is_cpu: bool = False               # a software adapter (SwiftShader, lavapipe): kernels pick CPU-friendly shapes
    subgroup_size: int | None = None   # the smallest subgroup the adapter runs (None: no subgroups feature)
    int8_dot: bool = False             # WGSL has packed_4x8_integer_dot_product (dot4I8Packed, pack4xI8)
    subgroup_matrix: tuple | None = None   # (M, N, K, subgroup size): f16 subgroup matrices (browser; kernels.sgmat_*)
    in_browser: bool = False           # WebGPU in a browser (BrowserDevice): its host work per step differs

    @property
    def prefill_chunk(self) -> int:
        """Prompt tokens a prefill pass takes by default: 512 on GPUs; 64 on software adapters, where a pass of 512
        would hold a Stop for minutes and the tiled kernels' padding costs more than it saves."""
        return 64 if self.is_cpu else 512

    def create_buffer(self, nbytes: int, *, kind: str = "storage", label: str = ""):
        """kind: "storage" (read/write, copy src/dst), "uniform" (uniform + copy dst)."""
        raise NotImplementedError

    def release(self, buf) -> None:
        """Free a buffer now (rather than when the device goes)."""
        raise NotImplementedError

    def write_buffer(self, buf, data, offset: int = 0) -> None:
        """Copy bytes (bytes / bytearray / numpy array) into ``buf`` at ``offset``."""
        raise NotImplementedError

    def copy_into(self, buf, at: int, source, offset: int, nbytes: int) -> None:
        """Copy ``nbytes`` of ``source`` (a model file source) from ``offset`` into ``buf`` at byte ``at``.

        The browser backend copies straight from a JS ArrayBuffer; nothing passes through the wasm heap."""
        raise NotImplementedError

    def pipeline(self, wgsl: str, label: str = ""):
        """A compute pipeline for entry point ``main`` (cached by source text)."""
        raise NotImplementedError

    def bind(self, pipeline, buffers: list):
        """A bind group for group 0; buffers[i] is bound at binding i (a buffer, or (buffer, offset, size))."""
        raise NotImplementedError

    def record(self, dispatches: list) -> "Plan":
        """Record a list of (pipeline, bind_group, (x, y, z)) once; returns a plan to pass to :meth:`submit`."""
        raise NotImplementedError

    def submit(self, plans: list, copies: list = (), early: bool = False) -> None:
        """Encode the recorded plans (in order, one compute pass) and the buffer copies (src, src_off, dst, dst_off, n)
        that follow them into one command buffer and submit it. early: the work is long (a prefill chunk) and the
        backend may send it in several command buffers, so that the GPU starts before the host has encoded it all."""
        raise NotImplementedError

    def encode(self, plans: list, copies: list = (), read: list = ()):
        """submit() in two halves: encode the command buffer now (plans, copies, then ``read``: slices (buf, offset,
        n) copied into a mappable buffer), send it later. Encoding ahead takes the host's work off the critical
        path: a constrained decode step encodes the next step's forward pass while it waits for a token."""
        raise NotImplementedError

    def send(self, encoded):
        """Submit an encode() result; when it has a ``read``, start mapping it now and return the pending read (its
        wait covers this submission and those before it, not those sent later), else None."""
        raise NotImplementedError

    def discard(self, encoded) -> None:
        """Drop an encode() result that will not be sent (its mappable buffer goes back to the pool)."""
        raise NotImplementedError

    async def collect(self, pending) -> list:
        """The bytes of a pending read from send(): one bytes object per slice of ``read``."""
        raise NotImplementedError

    async def read(self, buf, offset: int, nbytes: int) -> bytes:
        """Wait for submitted work and read ``nbytes`` of ``buf`` back to the host."""
        raise NotImplementedError

    async def settle(self) -> None:
        """Wait until the device has said whether every buffer created so far was allocated; raise GPUMemoryError
        naming the first that was not (the browser reports a failed allocation only later; natively create_buffer
        raises at once)."""

    def destroy(self) -> None:
        raise NotImplementedError


class Plan:
    """A recorded dispatch list: the backend's handle and how many dispatches it holds."""

    __slots__ = ("handle", "size", "recorder")

    def __init__(self, handle, size: int):
        self.handle = handle
        self.size = size
        self.recorder = None      # the Recorder that made it (labels, for profiling)


def buffer_error(said: str, nbytes: int, label: str, limits: dict, before: int):
    """The GPUMemoryError of a failed allocation: the buffer, its size, what was allocated before it, the device's
    limit and what it said, and what to do."""
    from ..errors import GPUMemoryError
    return GPUMemoryError(
        f"the GPU could not allocate buffer {label or '(unnamed)'!r} of {nbytes:,} bytes ({nbytes / 2**20:.1f} MiB; "
        f"{before:,} bytes allocated on this device before it; its maxBufferSize is "
        f"{int(limits.get('max-buffer-size', 0)):,}): {said}. Load the model with a smaller context size or the f16 "
        f"KV cache (half its memory), or a smaller model, or free GPU memory that other programs use")


async def get_device(**kwargs) -> Device:
    """The best device where this code runs (raises GPUUnavailableError with advice when there is none)."""
    if IN_BROWSER:
        from . import browser
        return await browser.BrowserDevice.create(**kwargs)
    from . import native
    return native.NativeDevice.create(**kwargs)
