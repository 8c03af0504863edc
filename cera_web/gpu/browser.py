"""Browser backend: Pyodide drives ``navigator.gpu`` through ``pyodide.ffi`` (main thread or a Web Worker).

Every Python→JS call costs microseconds here (about 5 µs; DESIGN.md §2), so this backend keeps the per-token call
count small: a plan is recorded once as JS arrays, and one call of a small JS helper encodes and submits it.
``calls`` counts the JS calls this backend makes, for the benchmark.
"""
from __future__ import annotations

import re

from ..errors import DeviceLostError, DownloadError, GPUUnavailableError
from ..kernels import pick_subgroup_matrix
from . import Device, Plan, buffer_error

SUBGROUP_MATRIX = "chromium-experimental-subgroup-matrix"     # Chromium's cooperative matrices (tensor cores)
# Limits requested at the adapter's maximum (the defaults: 128 MiB bindings, 16 KiB workgroup memory).
WANTED_LIMITS = ("maxBufferSize", "maxStorageBufferBindingSize", "maxComputeWorkgroupStorageSize",
                 "maxStorageBuffersPerShaderStage", "maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX")

_HELPER_JS = r"""
({
  errors: [],
  lost: null,
  closed: false,     // destroyed by destroy(): its loss is no news
  watch(device, onlost) {
    device.addEventListener('uncapturederror', (e) => { this.errors.push(String(e.error && e.error.message)); });
    device.lost.then((info) => {
      this.lost = `${(info.message || 'device lost').split('\n')[0].replace(/\.$/, '')}, reason: ${info.reason}`;
      if (!this.closed) onlost(this.lost);
    });
  },
  // why a read failed: the device's loss, if it comes within a second (mapAsync may reject first)
  async lostSoon(device) {
    await Promise.race([device.lost, new Promise((ok) => setTimeout(ok, 1000))]);
    return this.lost;
  },
  failed: [],
  allocated: Promise.resolve(),
  // a buffer inside error scopes: a failed allocation (out of memory, over a limit) is noted as "label\0size\0
  // bytes allocated before it\0what the device said" once the device has said so (settle() waits for that)
  createBuffer(device, desc, before) {
    device.pushErrorScope('out-of-memory');
    device.pushErrorScope('validation');
    const buf = device.createBuffer(desc);
    const note = (e) => { if (e) this.failed.push([desc.label, desc.size, before, e.message].join('\0')); };
    this.allocated = Promise.all([this.allocated, device.popErrorScope().then(note),
                                  device.popErrorScope().then(note)]).then(() => undefined);
    return buf;
  },
  async settle() {
    await this.allocated;
    const failed = this.failed;
    this.failed = [];
    return failed;
  },
  plan(pipes, groups, counts) {
    return { pipes, groups, counts: Int32Array.from(counts) };
  },
  encode(device, plans, copies, reads, staging) {
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    for (const p of plans) {
      for (let i = 0; i < p.pipes.length; i++) {
        pass.setPipeline(p.pipes[i]);
        pass.setBindGroup(0, p.groups[i]);
        pass.dispatchWorkgroups(p.counts[3 * i], p.counts[3 * i + 1], p.counts[3 * i + 2]);
      }
    }
    pass.end();
    for (const c of copies) enc.copyBufferToBuffer(c[0], c[1], c[2], c[3], c[4]);
    let at = 0;
    for (const r of reads) { enc.copyBufferToBuffer(r[0], r[1], staging, at, r[2]); at += r[2]; }
    return enc.finish();
  },
  submit(device, plans, copies) {
    device.queue.submit([this.encode(device, plans, copies, [], null)]);
  },
  send(device, cmd, staging, size) {
    device.queue.submit([cmd]);
    // mapped now, before later submits: the map waits for the work submitted so far only
    return staging ? staging.mapAsync(GPUMapMode.READ, 0, size) : null;
  },
  async collect(mapping, staging, size) {
    await mapping;
    const out = new Uint8Array(staging.getMappedRange(0, size).slice(0));
    staging.unmap();
    return out;
  },
  async read(device, src, offset, size, staging) {
    const enc = device.createCommandEncoder();
    enc.copyBufferToBuffer(src, offset, staging, 0, size);
    device.queue.submit([enc.finish()]);
    await staging.mapAsync(GPUMapMode.READ, 0, size);
    const out = new Uint8Array(staging.getMappedRange(0, size).slice(0));
    staging.unmap();
    return out;
  },
})
"""


def _kebab(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "-" + m.group(1).lower(), name)


class ArrayBufferSource:
    """A model file held in a JS ArrayBuffer (fetched or picked by the page). Python reads only the header."""

    def __init__(self, array_buffer, name: str = "model.gguf"):
        self.buffer = array_buffer
        self.name = name
        self.size = int(array_buffer.byteLength)

    def read(self, offset: int, n: int) -> bytes:
        from js import Uint8Array
        n = max(0, min(n, self.size - offset))
        return Uint8Array.new(self.buffer, offset, n).to_bytes()

    def close(self):
        self.buffer = None


class SliceSource:
    """A model file read a slice at a time into JS ArrayBuffers (``array_buffer``), so that neither the wasm heap nor
    the JS heap ever holds the whole file: ``read`` serves the header, the device's ``copy_into`` uploads tensor data
    in ``CHUNK``-byte slices (each written to the GPU at once). Both read synchronously, which only workers can."""

    CHUNK = 16 << 20     # bytes per slice read for upload: the most JS memory a copy holds at once

    def array_buffer(self, offset: int, n: int):
        """A JS ArrayBuffer with bytes [offset, offset + n) (shorter at the end of the file)."""
        raise NotImplementedError

    def read(self, offset: int, n: int) -> bytes:
        from js import Uint8Array
        n = max(0, min(n, self.size - offset))
        if not n:
            return b""
        data = self.array_buffer(offset, n)
        out = Uint8Array.new(data).to_bytes()
        release(data)
        return out


def release(array_buffer) -> None:
    """Free a JS ArrayBuffer's bytes now, not when the garbage collector comes to it: detach it (transfer(0)). A
    model loaded by slices goes through gigabytes of ArrayBuffers, and without this V8 let 0.4-0.6 GB of them wait
    for collection (the worker's JS heap at 8-12% of a 4.6 GB file). Nothing may use the buffer afterwards; a
    browser without ArrayBuffer.prototype.transfer leaves it to the collector."""
    try:
        array_buffer.transfer(0)
    except Exception:       # no transfer (older browsers), or detached already
        pass


class BlobSource(SliceSource):
    """A model file held in a JS Blob: a File from a file picker or drag-and-drop, or a file in the browser's
    origin-private file system (the page's model cache). The bytes stay on disk (or wherever the browser keeps the
    Blob) and are read through ``FileReaderSync``, which exists only in workers (the page's worker, PyScript's
    workers). On the main thread, read the Blob into an ArrayBuffer and use :class:`ArrayBufferSource` instead."""

    def __init__(self, blob, name: str = "model.gguf"):
        import js
        if not hasattr(js, "FileReaderSync"):
            raise TypeError("BlobSource needs FileReaderSync, which only workers have; on the main thread read the "
                            "Blob into an ArrayBuffer (await blob.arrayBuffer()) and use ArrayBufferSource")
        self.blob = blob
        self.name = name
        self.size = int(blob.size)
        self._reader = js.FileReaderSync.new()

    def array_buffer(self, offset: int, n: int):
        return self._reader.readAsArrayBuffer(self.blob.slice(offset, offset + n))

    def close(self):
        self.blob = None


class RangeSource(SliceSource):
    """A model file on a server that answers HTTP Range requests (the page's model store returns its URL when it
    cannot cache it), read a slice at a time by synchronous requests: a file of any size loads without being held
    anywhere whole. Synchronous requests for bytes exist only in workers."""

    def __init__(self, url: str, size: int, name: str = "model.gguf"):
        import js
        if not hasattr(js, "FileReaderSync"):      # a worker's global scope (as BlobSource)
            raise TypeError("RangeSource reads synchronously, which only workers can; on the main thread fetch the "
                            "file into an ArrayBuffer and use ArrayBufferSource")
        self.url = str(url)
        self.name = name
        self.size = int(size)

    def array_buffer(self, offset: int, n: int):
        import js
        end = min(offset + n, self.size)
        xhr = js.XMLHttpRequest.new()
        xhr.open("GET", self.url, False)
        xhr.responseType = "arraybuffer"
        xhr.setRequestHeader("Range", f"bytes={offset}-{end - 1}")
        try:
            xhr.send()
        except Exception as e:
            raise DownloadError(f"reading bytes {offset}-{end - 1} of {self.url} failed: {e}") from None
        if xhr.status != 206 or int(xhr.response.byteLength) != end - offset:
            raise DownloadError(f"the server did not answer a Range request for bytes {offset}-{end - 1} of "
                                f"{self.url} (HTTP {xhr.status}); reload the page to download the model again")
        return xhr.response

    def close(self):
        pass


class BrowserDevice(Device):
    in_browser = True

    def __init__(self, adapter, device, info: str, limits: dict, features: set, is_cpu: bool = False):
        from pyodide.code import run_js
        from pyodide.ffi import create_proxy
        self.adapter = adapter
        self.device = device
        self.name = info
        self.limits = limits
        self.features = features
        self.is_cpu = is_cpu
        self.calls = 0
        self._pipelines = {}
        self._staging = None
        self._staging_size = 0
        self._free_staging = []     # (mappable buffer, size) for encode(read=...), returned by collect
        self.live_buffers = []      # buffers created and not released (leak checks)
        self._allocated = 0         # their bytes
        self.js = run_js(_HELPER_JS)
        self.on_lost = None         # on_lost(message): called when the device is lost (not when destroy() ends it)
        self._lost_proxy = create_proxy(lambda _: self.on_lost and self.on_lost(str(self.lost_error())))
        self.js.watch(device, self._lost_proxy)

    @classmethod
    async def create(cls, limits_override: dict | None = None, power_preference: str = "high-performance"):
        import js
        from pyodide.ffi import to_js
        gpu = getattr(js.navigator, "gpu", None)
        if gpu is None:
            raise GPUUnavailableError(
                "this browser does not expose WebGPU (navigator.gpu is missing): use a current Chrome or Edge, "
                "served over http://127.0.0.1 or https; headless Chromium needs --enable-unsafe-webgpu")
        adapter = await gpu.requestAdapter(to_js({"powerPreference": power_preference},
                                                 dict_converter=js.Object.fromEntries))
        if adapter is None:
            raise GPUUnavailableError(
                "WebGPU is present but no GPU adapter is available (blocklisted driver or disabled GPU); "
                "enable WebGPU in the browser settings or try another browser")
        limits = {k: getattr(adapter.limits, k) for k in WANTED_LIMITS}
        features = [f for f in ("shader-f16", "subgroups", "timestamp-query") if adapter.features.has(f)]
        info = adapter.info
        matrix = None        # the prefill products' tensor cores (kernels.matmul_sgmat), where Chromium offers them
        if {"shader-f16", "subgroups"} <= set(features) and adapter.features.has(SUBGROUP_MATRIX) and info is not None:
            configs = [{k: getattr(c, k) for k in ("componentType", "resultComponentType", "M", "N", "K")}
                       for c in getattr(info, "subgroupMatrixConfigs", None) or []]
            matrix = pick_subgroup_matrix(configs, getattr(info, "subgroupMinSize", None),
                                          getattr(info, "subgroupMaxSize", None))
            if matrix is not None:
                features.append(SUBGROUP_MATRIX)
        try:
            device = await adapter.requestDevice(to_js(
                {"requiredLimits": limits, "requiredFeatures": features}, dict_converter=js.Object.fromEntries))
        except Exception as e:
            raise GPUUnavailableError(f"the GPU adapter refused a device: {e}") from None
        desc = " ".join(str(x) for x in (info.vendor, info.architecture, info.description) if x) if info else ""
        all_limits = {_kebab(k): int(getattr(device.limits, k)) for k in WANTED_LIMITS}
        all_limits["min-storage-buffer-offset-alignment"] = int(device.limits.minStorageBufferOffsetAlignment)
        if limits_override:
            all_limits.update(limits_override)
        is_cpu = bool(getattr(adapter, "isFallbackAdapter", False)) or "swiftshader" in desc.lower()
        dev = cls(adapter, device, f"{desc or 'WebGPU adapter'} (browser WebGPU)", all_limits, set(features), is_cpu)
        lang = getattr(gpu, "wgslLanguageFeatures", None)     # WGSL language features (dot4I8Packed, pack4xI8)
        dev.int8_dot = bool(lang is not None and lang.has("packed_4x8_integer_dot_product"))
        if "subgroups" in features and info is not None:       # the smallest subgroup the adapter may run
            size = getattr(info, "subgroupMinSize", None)
            dev.subgroup_size = int(size) if isinstance(size, (int, float)) and size > 0 else None
        dev.subgroup_matrix = matrix
        return dev

    def check(self):
        """Raise if the device was lost or reported errors (validation, out of memory)."""
        if self.js.lost is not None:
            raise self.lost_error()
        if self.js.errors.length:
            msg = str(self.js.errors.join("; "))
            self.js.errors.length = 0
            raise GPUUnavailableError(f"WebGPU reported an error: {msg}")

    # -- buffers -----------------------------------------------------------------------------------------------
    def create_buffer(self, nbytes, *, kind="storage", label=""):
        import js
        from pyodide.ffi import to_js
        U = js.GPUBufferUsage
        usage = (U.UNIFORM | U.COPY_DST) if kind == "uniform" else (U.STORAGE | U.COPY_DST | U.COPY_SRC)
        self.calls += 2
        size = max(16, (nbytes + 3) // 4 * 4)
        buf = self.js.createBuffer(self.device, to_js({"size": size, "usage": usage, "label": label},
                                                      dict_converter=js.Object.fromEntries), self._allocated)
        self._allocated += size
        self.live_buffers.append(buf)
        return buf

    async def settle(self):
        failed = await self.js.settle()
        if failed.length:
            label, size, before, said = str(failed[0]).split("\0", 3)
            raise buffer_error(said.split("\n")[0].rstrip("."), int(size), label, self.limits, int(before))

    def release(self, buf):
        """Free a buffer now (rather than when the device goes)."""
        self.live_buffers = [b for b in self.live_buffers if b is not buf]
        self._allocated -= int(buf.size)
        buf.destroy()

    def write_buffer(self, buf, data, offset=0):
        from pyodide.ffi import to_js
        mv = memoryview(data).cast("B")
        if len(mv) % 4:
            mv = memoryview(bytes(mv) + bytes(4 - len(mv) % 4))
        self.calls += 2
        self.device.queue.writeBuffer(buf, offset, to_js(mv))

    def copy_into(self, buf, at, source, offset, nbytes):
        size = (nbytes + 3) // 4 * 4
        if isinstance(source, ArrayBufferSource) and offset % 4 == 0 and offset + size <= source.size:
            self.calls += 1
            self.device.queue.writeBuffer(buf, at, source.buffer, offset, size)   # JS → GPU, no wasm heap
        elif isinstance(source, SliceSource):
            # slice by slice, Blob or Range request → JS ArrayBuffer → GPU: the wasm heap is not involved and at most one slice is
            # held in JS memory (writeBuffer copies it at once; the slice is then detached, freeing it)
            from js import Uint8Array
            for start in range(0, size, source.CHUNK):
                n = min(source.CHUNK, size - start)
                data = source.array_buffer(offset + start, n)
                if data.byteLength < n:      # the last tensor's padding to 4 bytes runs past the end of the file
                    padded = Uint8Array.new(n)
                    padded.set(Uint8Array.new(data))
                    release(data)
                    data = padded.buffer
                self.calls += 3
                self.device.queue.writeBuffer(buf, at + start, data, 0, n)
                release(data)                # writeBuffer copied it: its bytes go now, not at the next GC
        else:
            chunk = 16 << 20
            for start in range(0, nbytes, chunk):
                self.write_buffer(buf, source.read(offset + start, min(chunk, nbytes - start)), at + start)

    # -- pipelines -----------------------------------------------------------------------------------------------
    def pipeline(self, wgsl, label=""):
        import js
        from pyodide.ffi import to_js
        p = self._pipelines.get(wgsl)
        if p is None:
            conv = js.Object.fromEntries
            module = self.device.createShaderModule(to_js({"code": wgsl, "label": label}, dict_converter=conv))
            p = self.device.createComputePipeline(to_js(
                {"layout": "auto", "compute": {"module": module, "entryPoint": "main"}, "label": label},
                dict_converter=conv))
            self.calls += 4
            self._pipelines[wgsl] = p
        return p

    def bind(self, pipeline, buffers):
        import js
        from pyodide.ffi import to_js
        entries = []
        for i, b in enumerate(buffers):
            if isinstance(b, tuple):
                buf, off, size = b
                entries.append({"binding": i, "resource": {"buffer": buf, "offset": off, "size": size}})
            else:
                entries.append({"binding": i, "resource": {"buffer": b}})
        self.calls += 3
        return self.device.createBindGroup(to_js(
            {"layout": pipeline.getBindGroupLayout(0), "entries": entries}, dict_converter=js.Object.fromEntries))

    def record(self, dispatches):
        from pyodide.ffi import to_js
        pipes = [d[0] for d in dispatches]
        groups = [d[1] for d in dispatches]
        counts = [c for d in dispatches for c in d[2]]
        self.calls += 4
        return Plan(self.js.plan(to_js(pipes), to_js(groups), to_js(counts)), len(dispatches))

    def submit(self, plans, copies=(), early=False):
        """One command buffer whatever ``early`` says: the page's encoding is one JS call."""
        from pyodide.ffi import to_js
        self.calls += 3
        self.submits += 1
        self.dispatches += sum(p.size for p in plans)
        self.js.submit(self.device, to_js([p.handle for p in plans]), to_js([list(c) for c in copies]))

    def encode(self, plans, copies=(), read=()):
        from pyodide.ffi import to_js
        staging, size = None, 0
        if read:
            read = [(b, off, (n + 3) // 4 * 4, n) for b, off, n in read]
            size = sum(r[2] for r in read)
            fits = [i for i, (_, n) in enumerate(self._free_staging) if n >= size]
            staging = self._free_staging.pop(fits[0])[0] if fits else self._map_buffer(max(256, size))
        self.calls += 4
        self.dispatches += sum(p.size for p in plans)
        cmd = self.js.encode(self.device, to_js([p.handle for p in plans]), to_js([list(c) for c in copies]),
                             to_js([list(r[:3]) for r in read]), staging)
        return cmd, staging, size, [r[3] for r in read]

    def send(self, encoded):
        cmd, staging, size, parts = encoded
        self.calls += 1
        self.submits += 1
        mapping = self.js.send(self.device, cmd, staging, size)
        return None if staging is None else (mapping, staging, size, parts)

    def discard(self, encoded):
        if encoded[1] is not None:
            self._free_staging.append((encoded[1], int(encoded[1].size)))

    async def collect(self, pending) -> list[bytes]:
        mapping, staging, size, parts = pending
        self.calls += 2
        try:
            raw = (await self.js.collect(mapping, staging, size)).to_bytes()
        except Exception as e:    # a lost device rejects mapAsync (AbortError) before anything else says so
            raise await self._read_failed(e) from None
        self._free_staging.append((staging, int(staging.size)))
        out, at = [], 0
        for n in parts:
            out.append(raw[at:at + n])
            at += (n + 3) // 4 * 4
        return out

    def _map_buffer(self, size):
        import js
        from pyodide.ffi import to_js
        self.calls += 1
        return self.device.createBuffer(to_js({"size": (size + 255) // 256 * 256,
                                               "usage": js.GPUBufferUsage.MAP_READ | js.GPUBufferUsage.COPY_DST},
                                              dict_converter=js.Object.fromEntries))

    async def read(self, buf, offset, nbytes):
        import js
        from pyodide.ffi import to_js
        size = (nbytes + 3) // 4 * 4
        if self._staging is None or self._staging_size < size:
            if self._staging is not None:
                self._staging.destroy()
            self._staging_size = max(size, 256)
            self._staging = self.device.createBuffer(to_js(
                {"size": self._staging_size, "usage": js.GPUBufferUsage.MAP_READ | js.GPUBufferUsage.COPY_DST},
                dict_converter=js.Object.fromEntries))
        self.calls += 2
        try:
            out = await self.js.read(self.device, buf, offset, size, self._staging)
        except Exception as e:    # a lost device rejects mapAsync (AbortError) before anything else says so
            raise await self._read_failed(e) from None
        self.check()
        return out.to_bytes()[:nbytes]

    def lost_error(self) -> DeviceLostError:
        return DeviceLostError(f"the GPU device was lost ({self.js.lost}); load the model again")

    async def _read_failed(self, e) -> Exception:
        """The error of a failed read: DeviceLostError when the device was lost (it may say so just after the read
        fails), else GPUUnavailableError."""
        if await self.js.lostSoon(self.device) is not None:
            return self.lost_error()
        self.check()
        return GPUUnavailableError(f"reading from the GPU failed ({str(e).splitlines()[0]}); load the model again")

    def destroy(self):
        for buf in self.live_buffers:
            buf.destroy()
        self.live_buffers = []
        self._pipelines.clear()
        self.js.closed = True
        self.device.destroy()
        self._lost_proxy.destroy()
