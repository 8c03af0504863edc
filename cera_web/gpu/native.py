"""Native backend: the same WGSL through wgpu-py (Vulkan / Metal / DX12). Used by tests, the CLI and benchmarks."""
from __future__ import annotations

import os
import weakref

import numpy as np

from ..errors import DeviceLostError, GPUUnavailableError
from . import Device, Plan, buffer_error

try:   # wgpu-native's C entry points, for the fast encode path (falls back to the public API when absent)
    from wgpu.backends.wgpu_native import _api as _raw
    _raw.lib.wgpuComputePassEncoderSetBindGroup, _raw.libf.wgpuQueueSubmitForIndex, _raw.ffi.NULL   # noqa: B018
except Exception:  # pragma: no cover - another wgpu-py layout
    _raw = None

_ZEROS = _raw.ffi.new("uint8_t[4]") if _raw is not None else None    # check_alive's write
EARLY_FIRST = 32     # dispatches of the first command buffer of an early submit (Device.submit)

# Limits we ask for at the adapter's maximum (the defaults are far lower: 128 MiB bindings, 16 KiB workgroup memory).
WANTED_LIMITS = (
    "max-buffer-size",
    "max-storage-buffer-binding-size",
    "max-compute-workgroup-storage-size",
    "max-storage-buffers-per-shader-stage",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-size-x",
)


class NativeDevice(Device):
    def __init__(self, adapter, device, limits_override=None):
        import wgpu
        self._wgpu = wgpu
        self.adapter = adapter
        self.device = device
        info = adapter.info
        self.name = f"{info.get('device') or info.get('description')} ({info.get('backend_type', '?')}, wgpu-py)"
        self.limits = dict(device.limits)
        if limits_override:
            self.limits.update(limits_override)
        self.features = set(device.features)
        self.is_cpu = info.get("adapter_type") == "CPU"
        if os.environ.get("CERA_WEB_KERNELS") in ("gpu", "cpu"):   # force a kernel shape (tests, benchmarks)
            self.is_cpu = os.environ["CERA_WEB_KERNELS"] == "cpu"
        self.calls = 0
        self._pipelines = {}
        self._free_staging = []    # mappable buffers for encode(read=...)
        self.live_buffers = weakref.WeakSet()   # buffers created and not released (leak checks)
        self._alive_probe = device.create_buffer(size=16, usage=wgpu.BufferUsage.COPY_DST, label="device check")
        self.subgroup_size = self._probe_subgroup_size() if "subgroup" in self.features else None
        if os.environ.get("CERA_WEB_SUBGROUPS") == "0":    # tests and benchmarks: the path without subgroups
            self.subgroup_size = None
        self.int8_dot = self._probe_int8_dot()

    @classmethod
    def create(cls, limits_override: dict | None = None, power_preference: str = "high-performance"):
        os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")   # silences a harmless warning from the Vulkan loader
        try:
            import wgpu
        except ImportError as e:   # pragma: no cover - wgpu is a dependency
            raise GPUUnavailableError(f"the native backend needs wgpu-py (pip install wgpu): {e}") from None
        try:
            adapter = wgpu.gpu.request_adapter_sync(power_preference=power_preference)
        except Exception as e:
            adapter = None
            why = str(e)
        else:
            why = "no adapter"
        if adapter is None:
            raise GPUUnavailableError(
                f"no WebGPU adapter found through wgpu-py ({why}). Install a Vulkan driver "
                "(on Debian: apt-get install mesa-vulkan-drivers) or use the CPU reference (--cpu).")
        limits = {k: adapter.limits[k] for k in WANTED_LIMITS if k in adapter.limits}
        features = [f for f in ("shader-f16", "subgroup", "timestamp-query") if f in adapter.features]
        device = adapter.request_device_sync(required_limits=limits, required_features=features)
        return cls(adapter, device, limits_override)

    # -- buffers -----------------------------------------------------------------------------------------------
    def create_buffer(self, nbytes, *, kind="storage", label=""):
        U = self._wgpu.BufferUsage
        usage = U.UNIFORM | U.COPY_DST if kind == "uniform" else U.STORAGE | U.COPY_DST | U.COPY_SRC
        self.calls += 1
        try:
            buf = self.device.create_buffer(size=max(16, (nbytes + 3) // 4 * 4), usage=usage, label=label)
        except self._wgpu.GPUError as e:
            before = sum(b.size for b in self.live_buffers)
            raise buffer_error(_last_line(e), nbytes, label, self.limits, before) from None
        self.live_buffers.add(buf)
        return buf

    def release(self, buf):
        """Free a buffer now (rather than when the device goes)."""
        self.live_buffers.discard(buf)
        buf.destroy()

    def write_buffer(self, buf, data, offset=0):
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data)
        mv = memoryview(data).cast("B")
        if len(mv) % 4:
            mv = memoryview(bytes(mv) + bytes(4 - len(mv) % 4))
        self.calls += 1
        try:
            self.device.queue.write_buffer(buf, offset, mv)
        except self._wgpu.GPUError as e:
            raise self._lost(e) from None

    def copy_into(self, buf, at, source, offset, nbytes):
        chunk = 64 << 20
        for start in range(0, nbytes, chunk):
            self.write_buffer(buf, source.read(offset + start, min(chunk, nbytes - start)), at + start)

    def _probe_subgroup_size(self):
        """The subgroup size of a 64-thread compute kernel (wgpu-py's adapter info does not carry the adapter's
        subgroup sizes): the smallest seen over the workgroup."""
        buf = self.create_buffer(4 * 64)
        pipe = self.pipeline("@group(0) @binding(0) var<storage, read_write> Y: array<u32>;\n"
                             "@compute @workgroup_size(64) fn main(@builtin(local_invocation_index) i: u32, "
                             "@builtin(subgroup_size) s: u32) { Y[i] = s; }", "subgroup probe")
        self.submit([self.record([(pipe, self.bind(pipe, [buf]), (1, 1, 1))])])
        self.dispatches = self.submits = self.calls = 0
        sizes = np.frombuffer(bytes(self.device.queue.read_buffer(buf, 0, 4 * 64)), np.uint32)
        self.release(buf)
        return int(sizes.min())

    def _probe_int8_dot(self) -> bool:
        """Whether this WGSL compiler has packed_4x8_integer_dot_product: wgpu-py 0.32 reports no WGSL language
        features (wgpu.gpu.wgsl_language_features is empty), so compile a shader that uses it."""
        try:
            self.device.create_shader_module(code=(
                "requires packed_4x8_integer_dot_product;\n"
                "@group(0) @binding(0) var<storage, read_write> Y: array<i32>;\n"
                "@compute @workgroup_size(1) fn main() { Y[0] = dot4I8Packed(pack4xI8(vec4<i32>(Y[1])), 1u); }"),
                label="int8 dot probe")
        except self._wgpu.GPUError:
            return False
        return True

    # -- pipelines -----------------------------------------------------------------------------------------------
    def pipeline(self, wgsl, label=""):
        p = self._pipelines.get(wgsl)
        if p is None:
            # naga rejects WebGPU's `enable subgroups;` (it allows subgroup builtins whenever the feature is on)
            module = self.device.create_shader_module(code=wgsl.replace("enable subgroups;", ""), label=label)
            p = self.device.create_compute_pipeline(
                layout="auto", compute={"module": module, "entry_point": "main"}, label=label)
            self._pipelines[wgsl] = p
        return p

    def bind(self, pipeline, buffers):
        entries = []
        for i, b in enumerate(buffers):
            if isinstance(b, tuple):
                buf, off, size = b
            else:
                buf, off, size = b, 0, b.size
            entries.append({"binding": i, "resource": {"buffer": buf, "offset": off, "size": size}})
        self.calls += 1
        return self.device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)

    def record(self, dispatches):
        dispatches = list(dispatches)
        if _raw is not None:
            # the C handles, for the fast path in submit (the plan keeps the Python objects alive)
            raw = [(p._internal, g._internal, x, y, z) for p, g, (x, y, z) in dispatches]
            return Plan((dispatches, raw), len(dispatches))
        return Plan((dispatches, None), len(dispatches))

    def submit(self, plans, copies=(), early=False):
        """early: a long dispatch list goes in command buffers of EARLY_FIRST dispatches, then twice as many each
        time, each sent as soon as it is encoded: the GPU runs the first while the host encodes the rest (a
        512-token SmolLM2 chunk is ~330 dispatches, ~1 ms of encoding)."""
        size = sum(p.size for p in plans)
        if not early or size <= 2 * EARLY_FIRST:
            self.send(self.encode(plans, copies))
            return
        ds = [d for p in plans for d in p.handle[0]]
        raw = [r for p in plans for r in p.handle[1]] if all(p.handle[1] is not None for p in plans) else None
        at, n = 0, EARLY_FIRST
        while at < size:
            end = size if size - at < 2 * n else at + n      # no short last piece
            piece = Plan((ds[at:end], raw[at:end] if raw is not None else None), end - at)
            self.send(self.encode([piece], copies if end == size else ()))
            at, n = end, 2 * n

    def encode(self, plans, copies=(), read=()):
        try:
            return self._encode(plans, copies, read)
        except self._wgpu.GPUError as e:
            if "lost" not in _last_line(e).lower():
                raise               # a bug, not a lost device: as wgpu said it
            raise self._lost(e) from None

    def _encode(self, plans, copies, read):
        enc = self.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        for plan in plans:
            self.dispatches += plan.size
            dispatches, raw = plan.handle
            if raw is not None:
                # wgpu-py's public methods cost ~10 µs a dispatch in Python (argument checks, a cffi allocation
                # per bind group); the same three wgpu-native calls made directly cost ~1 µs through wgpu-py's
                # error-capturing wrappers (libf), ~0.2 µs through cffi's own (lib). Recording a dispatch in a pass
                # reports nothing: wgpu-native keeps a pass's errors for cp.end() and enc.finish(), which go
                # through the wrappers and raise them.
                lib, null, cpi = _raw.lib, _raw.ffi.NULL, cp._internal
                set_pipeline = lib.wgpuComputePassEncoderSetPipeline
                set_group = lib.wgpuComputePassEncoderSetBindGroup
                dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
                for pipe, group, x, y, z in raw:
                    set_pipeline(cpi, pipe)
                    set_group(cpi, 0, group, 0, null)
                    dispatch(cpi, x, y, z)
            else:
                for pipe, group, (x, y, z) in dispatches:
                    cp.set_pipeline(pipe)
                    cp.set_bind_group(0, group)
                    cp.dispatch_workgroups(x, y, z)
        cp.end()
        for src, src_off, dst, dst_off, n in copies:
            enc.copy_buffer_to_buffer(src, src_off, dst, dst_off, n)
        staging = None
        if read:
            size = sum((n + 3) // 4 * 4 for _, _, n in read)
            staging = self._staging(size)
            at = 0
            for buf, off, n in read:
                enc.copy_buffer_to_buffer(buf, off, staging, at, (n + 3) // 4 * 4)
                at += (n + 3) // 4 * 4
            staging = (staging, size, [n for _, _, n in read])
        return (enc.finish(), staging)

    def send(self, encoded):
        cmd, staging = encoded
        self.check_alive()      # wgpu-native aborts the process on a submit to a lost device
        try:
            if staging is None or _raw is None:
                self.device.queue.submit([cmd])
                index = None
            else:
                index = _raw.libf.wgpuQueueSubmitForIndex(self.device.queue._internal, 1,
                                                          _raw.ffi.new("WGPUCommandBuffer[1]", [cmd._internal]))
        except self._wgpu.GPUError as e:
            raise self._lost(e) from None
        self.calls += 1
        self.submits += 1
        if staging is None:
            return None
        buf, size, parts = staging
        if _raw is None:        # another wgpu-py layout: map through the public API (waits for all submitted work)
            return (buf, size, parts, buf.map_async("READ_NOSYNC"), None)
        # map now, and later wait only for this submission (wgpu-py's map waits for everything submitted, which
        # would include the work sent after this read)
        done = []

        @_raw.ffi.callback("void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)")
        def mapped(status, message, _u1, _u2):
            done.append(status)

        info = _raw.ffi.new("WGPUBufferMapCallbackInfo *")
        info.mode = _raw.lib.WGPUCallbackMode_AllowProcessEvents
        info.callback = mapped
        _raw.libf.wgpuBufferMapAsync(buf._internal, _raw.lib.WGPUMapMode_Read, 0, size, info[0])
        buf.cera_mapped = mapped    # lives as long as the buffer: a map left pending (a lost device) calls it on release
        return (buf, size, parts, (done, mapped), index)

    def discard(self, encoded):
        if encoded[1] is not None:
            self._free_staging.append(encoded[1][0])

    async def collect(self, pending) -> list[bytes]:
        buf, size, parts, waiter, index = pending
        self.calls += 1
        if index is None:
            waiter.sync_wait()
            data = bytes(buf.read_mapped(0, size))
            buf.unmap()
        else:
            done, _ = waiter
            lib, dev = _raw.libf, self.device._internal
            self.check_alive()
            lib.wgpuDevicePoll(dev, True, _raw.ffi.new("WGPUSubmissionIndex *", index))
            while not done:     # the callback runs in a poll once its submission is done
                self.check_alive()
                lib.wgpuDevicePoll(dev, False, _raw.ffi.NULL)
            if done[0] != _raw.lib.WGPUMapAsyncStatus_Success:
                raise GPUUnavailableError("reading from the GPU failed (buffer map refused); load the model again")
            self.check_alive()      # a mapped buffer of a lost device is destroyed: reading it aborts the process
            data = bytes(_raw.ffi.buffer(lib.wgpuBufferGetConstMappedRange(buf._internal, 0, size), size))
            lib.wgpuBufferUnmap(buf._internal)
        self._free_staging.append(buf)
        out, at = [], 0
        for n in parts:
            out.append(data[at:at + n])
            at += (n + 3) // 4 * 4
        return out

    def _staging(self, size):
        """A mappable buffer of at least ``size`` bytes for encode(read=...), from the free ones (collect returns
        them)."""
        for i, b in enumerate(self._free_staging):
            if b.size >= size:
                return self._free_staging.pop(i)
        U = self._wgpu.BufferUsage
        return self.device.create_buffer(size=max(256, (size + 255) // 256 * 256), usage=U.MAP_READ | U.COPY_DST,
                                         label="staging")

    async def read(self, buf, offset, nbytes):
        self.calls += 1
        self.check_alive()
        try:
            return bytes(self.device.queue.read_buffer(buf, offset, (nbytes + 3) // 4 * 4))[:nbytes]
        except self._wgpu.GPUError as e:
            raise self._lost(e) from None

    def destroy(self):
        for buf in list(self.live_buffers):
            buf.destroy()
        self.live_buffers.clear()
        self._free_staging.clear()
        self._pipelines.clear()
        self.device.destroy()

    def check_alive(self):
        """Raise DeviceLostError if the device was lost. wgpu-py does not report a loss (its callback only logs it),
        and reading a mapped buffer of a lost device aborts the process, so ask the queue: a 4-byte write fails once
        the device is gone."""
        try:
            if _raw is None:
                self.device.queue.write_buffer(self._alive_probe, 0, b"\0\0\0\0")
            else:               # the same call without wgpu-py's checks: it runs before every submit
                _raw.libf.wgpuQueueWriteBuffer(self.device.queue._internal, self._alive_probe._internal, 0,
                                               _ZEROS, 4)
        except self._wgpu.GPUError as e:
            raise self._lost(e) from None

    def _lost(self, e):
        said = _last_line(e)
        if "lost" in said.lower():
            return DeviceLostError(f"the GPU device was lost ({said}); load the model again")
        return GPUUnavailableError(f"the GPU failed ({said}); load the model again")


def _last_line(e) -> str:
    """The last line of a wgpu error (its cause), without a final period."""
    said = [line.strip() for line in str(e).splitlines() if line.strip()]
    return said[-1].rstrip(".") if said else type(e).__name__


def time_dispatches(dev: NativeDevice, plan, repeats: int = 5) -> list[float] | None:
    """GPU microseconds of each dispatch of a plan, from timestamp queries: every dispatch in its own compute pass
    with a timestamp at the pass's start and end, the plan submitted ``repeats`` times, the median per dispatch.
    None where the device has no timestamp queries. For profiles only (bench --profile): a pass per dispatch adds
    the passes' own boundaries, so the sum is a little more than the plan's time in one pass."""
    wgpu = dev._wgpu
    if "timestamp-query" not in dev.features:
        return None
    dispatches = plan.handle[0]
    n = len(dispatches)
    qs = dev.device.create_query_set(type=wgpu.QueryType.timestamp, count=2 * n)
    U = wgpu.BufferUsage
    resolved = dev.device.create_buffer(size=16 * n, usage=U.QUERY_RESOLVE | U.COPY_SRC)
    runs = []
    for _ in range(repeats):
        enc = dev.device.create_command_encoder()
        for i, (pipe, group, (x, y, z)) in enumerate(dispatches):
            cp = enc.begin_compute_pass(timestamp_writes={
                "query_set": qs, "beginning_of_pass_write_index": 2 * i, "end_of_pass_write_index": 2 * i + 1})
            cp.set_pipeline(pipe)
            cp.set_bind_group(0, group)
            cp.dispatch_workgroups(x, y, z)
            cp.end()
        enc.resolve_query_set(qs, 0, 2 * n, resolved, 0)
        dev.device.queue.submit([enc.finish()])
        ns = np.frombuffer(bytes(dev.device.queue.read_buffer(resolved, 0, 16 * n)), np.uint64).astype(np.int64)
        runs.append((ns[1::2] - ns[0::2]) / 1000.0)
    resolved.destroy()
    qs.destroy()
    return [round(float(v), 2) for v in np.median(np.array(runs), axis=0)]
