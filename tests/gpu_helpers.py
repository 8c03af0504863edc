"""The harness of the kernel tests (tests/test_kernels.py, tests/test_formats.py): buffers in and out of a device
(cera_web.gpu.native.NativeDevice: wgpu, lavapipe on CI), the step uniform and one dispatch of a WGSL kernel."""
import asyncio
import struct

import numpy as np


def upload(dev, data):
    """A storage buffer holding ``data``: bytes, or an array's bytes as they are (no conversion)."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data)
    buf = dev.create_buffer(memoryview(data).nbytes)
    dev.write_buffer(buf, data)
    return buf


def f32_buffer(dev, a):
    """A storage buffer holding ``a`` as float32."""
    return upload(dev, np.asarray(a, np.float32))


def step_buffer(dev, n_tokens, pos0=0, out_index=0):
    """The 16-byte Step uniform of common.wgsl for a pass of ``n_tokens`` tokens from position ``pos0``."""
    buf = dev.create_buffer(16, kind="uniform")
    dev.write_buffer(buf, struct.pack("<4I", n_tokens, pos0, out_index, pos0 + n_tokens))
    return buf


def run(dev, wgsl, buffers, groups):
    """One dispatch of kernel text ``wgsl`` over ``groups`` workgroups (x, y, z), bindings in order."""
    pipe = dev.pipeline(wgsl)
    dev.submit([dev.record([(pipe, dev.bind(pipe, buffers), groups)])])


def read(dev, buf, n, dtype=np.float32):
    """The first ``n`` values of ``buf``."""
    return np.frombuffer(asyncio.run(dev.read(buf, 0, n * np.dtype(dtype).itemsize)), dtype=dtype)
