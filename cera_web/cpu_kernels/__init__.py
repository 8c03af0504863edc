"""The CPU path's matrix products over quantized weights: qmatmul.c built to WebAssembly (wasm32 + simd128).

    kernels = await load_kernels()          # None (with a one-line notice) where the .wasm is not built
    w = kernels.place(raw, ggml_type, rows, cols)   # a weight [rows, cols], its GGUF bytes copied in once
    y = w.matmul(x)                         # x [T, cols] float32 -> y [T, rows] float32
    e = w.rows_f32(ids)                     # rows of the weight dequantized (an embedding lookup)

The module runs in its own WebAssembly instance with its own linear memory, apart from Pyodide's heap: the weights
stay there in their GGUF blocks (a 0.5B model's ~0.4 GB fits beside Python's heap, not in it), and each product
copies its activations in and its result out (a few kilobytes). In the browser the instance is the browser's
WebAssembly (through Pyodide's JS interop); natively it is wasmtime (a test dependency), so the native tests run
the very binary the page runs. qmatmul.c says what the module computes; cera_web/tools/build_kernels.py builds it
(with the pinned ziglang of assets.json) as set-up, and docs/DESIGN.md ("The CPU path's kernels") says why.

Types with a kernel: KERNEL_TYPES (F16 weights are widened to F32 as they are placed). Other types stay on the
numpy float32 path (cera_web.reference), exactly as before.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..gguf import GGML_BLOCK, GGMLType

WASM = Path(__file__).with_name("qmatmul.wasm")
PAGE = 65536
KERNEL_TYPES = {GGMLType.F32, GGMLType.F16, GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1,
                GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q6_K}
_notified = False


def notice(msg: str):
    """One line on stderr (once a process): why the CPU path runs without its kernels."""
    global _notified
    if not _notified:
        _notified = True
        print(f"cera_web: {msg}", file=sys.stderr, flush=True)


async def load_kernels():
    """A fresh Kernels instance, or None (and a one-line notice) where qmatmul.wasm is missing or cannot run here:
    the CPU path then keeps its float32 numpy products."""
    try:
        data = WASM.read_bytes()
    except OSError:
        notice(f"the CPU kernels ({WASM.name}) are not built; the CPU path uses float32 numpy products "
               "(slower; run `python serve.py` or `python3 tests/run.py` once to build them)")
        return None
    try:
        if sys.platform == "emscripten":
            runtime = await _BrowserRuntime.create(data)
        else:
            runtime = _WasmtimeRuntime(data)
    except Exception as exc:       # no wasmtime natively, a browser without wasm SIMD: the old path, one line
        notice(f"the CPU kernels cannot run here ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
               "the CPU path uses float32 numpy products")
        return None
    return Kernels(runtime)


class _WasmtimeRuntime:
    """qmatmul.wasm in wasmtime (native): exports called directly, memory seen as a numpy array."""

    def __init__(self, data: bytes):
        import wasmtime
        self._store = wasmtime.Store(wasmtime.Engine())
        inst = wasmtime.Instance(self._store, wasmtime.Module(self._store.engine, data), [])
        ex = inst.exports(self._store)
        self._memory = ex["memory"]
        self._fns = {name: ex[name] for name in ("qmatmul", "qmatmul_init", "qmatmul_heap_base")}
        self._view = None
        try:            # wasmtime's checked call converts each argument through its type (~0.3 ms a call here)
            self._fast = {name: self._unchecked(f) for name, f in self._fns.items()}
        except (ImportError, AttributeError):
            self._fast = None

    def _unchecked(self, func):
        """func called through wasmtime_func_call_unchecked: i32 arguments, at most one i32 result."""
        import ctypes

        from wasmtime import _ffi as ffi
        ctx, ref, call = self._store._context(), ctypes.byref(func._func), ffi.wasmtime_func_call_unchecked
        raw_t, trap_t = ffi.wasmtime_val_raw_t, ctypes.POINTER(ffi.wasm_trap_t)

        def run(*args):
            buf = (raw_t * max(len(args), 1))()
            for i, a in enumerate(args):
                buf[i].i32 = a - (1 << 32) if a >= 1 << 31 else a
            trap = trap_t()
            if call(ctx, ref, buf, len(buf), ctypes.byref(trap)) or trap:
                raise RuntimeError("the CPU kernel trapped (a product outside its memory)")
            return buf[0].i32
        return run

    def call(self, name, *args):
        if self._fast is not None:
            return self._fast[name](*args)
        return self._fns[name](self._store, *args)

    def size(self) -> int:
        return self._memory.data_len(self._store)

    def grow(self, pages: int):
        self._memory.grow(self._store, pages)
        self._view = None

    def _u8(self) -> np.ndarray:
        if self._view is None:
            self._view = np.ctypeslib.as_array(self._memory.data_ptr(self._store), shape=(self.size(),))
        return self._view

    def write(self, off: int, data: np.ndarray, cache: bool = False):
        self._u8()[off:off + data.nbytes] = data.reshape(-1).view(np.uint8)

    def read_into(self, off: int, out: np.ndarray, cache: bool = False):
        out.reshape(-1).view(np.uint8)[:] = self._u8()[off:off + out.nbytes]


class _BrowserRuntime:
    """qmatmul.wasm in the browser's WebAssembly: its exports called through Pyodide's JS interop, data copied
    with TypedArray.assign / assign_to (one JS call each) through views cached by size."""

    @classmethod
    async def create(cls, data: bytes):
        import js
        from pyodide.ffi import to_js
        result = await js.WebAssembly.instantiate(to_js(data), js.Object.new())
        return cls(result.instance.exports)

    def __init__(self, exports):
        import js
        self._js = js
        self._ex = exports
        self._memory = exports.memory
        self._fns = {name: getattr(exports, name) for name in ("qmatmul", "qmatmul_init", "qmatmul_heap_base")}
        self._views = {}

    def call(self, name, *args):
        return self._fns[name](*args)

    def size(self) -> int:
        return int(self._memory.buffer.byteLength)

    def grow(self, pages: int):
        self._memory.grow(pages)
        self._views = {}            # views of the old ArrayBuffer, detached now

    def _new_view(self, off: int, arr: np.ndarray):
        if arr.dtype == np.float32:
            return self._js.Float32Array.new(self._memory.buffer, off, arr.size)
        return self._js.Uint8Array.new(self._memory.buffer, off, arr.nbytes)

    def _copy(self, off: int, arr: np.ndarray, cache: bool, method: str):
        """view.assign(arr) or view.assign_to(arr) through a TypedArray over [off, off + arr.nbytes): the work
        area's views are kept (a few sizes, one JS call saved a copy), others made for the one copy."""
        if arr.dtype != np.float32:
            arr = arr.reshape(-1).view(np.uint8)
        if not cache:           # (a JsProxy's JS reference goes with its last Python reference)
            getattr(self._new_view(off, arr), method)(arr)
            return
        key = (off, arr.nbytes, arr.dtype.char)
        view = self._views.get(key)
        if view is None:
            if len(self._views) >= 64:
                self._views = {}
            view = self._views[key] = self._new_view(off, arr)
        getattr(view, method)(arr)

    def write(self, off: int, data: np.ndarray, cache: bool = False):
        self._copy(off, data, cache, "assign")

    def read_into(self, off: int, out: np.ndarray, cache: bool = False):
        self._copy(off, out, cache, "assign_to")


class Kernels:
    """One qmatmul.wasm instance: weights placed upward from the module's heap base, and a work area (activations in,
    their 8-bit copy, results out) placed after them and grown when a call needs more."""

    def __init__(self, runtime):
        self.rt = runtime
        self.rt.call("qmatmul_init")
        self.top = (int(self.rt.call("qmatmul_heap_base")) + 63) & ~63
        self.weight_bytes = 0
        self._work = None           # (x offset, y offset, scratch offset, bytes each) of the work area
        self._work_size = 0

    def _alloc(self, n: int) -> int:
        off = self.top
        self.top = (off + n + 63) & ~63
        if self.top > self.rt.size():
            if self.top > (1 << 32) - PAGE:
                raise MemoryError(f"the CPU kernels' memory would pass 4 GiB ({self.top} bytes)")
            try:
                self.rt.grow((self.top - self.rt.size() + PAGE - 1) // PAGE)
            except Exception as exc:        # the browser's RangeError, wasmtime's error: out of memory
                raise MemoryError(f"the CPU kernels' memory cannot grow to {self.top / 1e6:.0f} MB for this model's "
                                  f"weights ({type(exc).__name__})") from None
        return off

    def place(self, raw, ggml_type, rows: int, cols: int) -> "QuantWeight":
        """Copy a [rows, cols] weight's GGUF bytes into the module's memory (F16 widened to F32) once."""
        t = GGMLType(ggml_type)
        data = np.frombuffer(raw, np.uint8) if not isinstance(raw, np.ndarray) else raw.reshape(-1).view(np.uint8)
        if t == GGMLType.F16:
            data = data.view("<f2").astype(np.float32).view(np.uint8)
            t = GGMLType.F32
        off = self._alloc(data.nbytes)
        self.rt.write(off, data)
        self.weight_bytes += data.nbytes
        return QuantWeight(self, t, off, rows, cols, data.nbytes // rows)

    def _work_area(self, T: int, rows: int, cols: int):
        need = 4 * T * max(rows, cols)
        scratch = scratch_bytes(cols, T)
        if self._work is None or need > self._work[3] or scratch > self._work[4]:
            size = max(need, 4 * 16 * 4096)
            scr = max(scratch, scratch_bytes(4096, 16))
            self._work = (self._alloc(size), self._alloc(size), self._alloc(scr), size, scr)
        return self._work

    def matmul(self, w: "QuantWeight", x: np.ndarray) -> np.ndarray:
        """x [..., cols] float32 -> [..., rows]: x @ W.T with W the placed weight."""
        lead = x.shape[:-1]
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, w.cols)
        T = x.shape[0]
        xo, yo, so, _, _ = self._work_area(T, w.rows, w.cols)
        self.rt.write(xo, x, cache=True)
        if self.rt.call("qmatmul", int(w.type), w.off, w.rows, w.cols, xo, T, yo, so) != 0:
            raise ValueError(f"qmatmul refused a {w.type.name} weight of {w.rows}x{w.cols}")
        y = np.empty((T, w.rows), np.float32)
        self.rt.read_into(yo, y, cache=True)
        return y.reshape(*lead, w.rows)


class QuantWeight:
    """A weight [rows, cols] held in a Kernels instance's memory as its GGUF blocks: ``matmul(x)`` is x @ W.T, and
    ``w[ids]`` (``rows_f32``) dequantizes rows (an embedding lookup). reference._linear takes it in place of a
    float32 array."""

    def __init__(self, kernels: Kernels, ggml_type: GGMLType, off: int, rows: int, cols: int, row_bytes: int):
        self.kernels, self.type, self.off, self.rows, self.cols, self.row_bytes = (kernels, ggml_type, off, rows,
                                                                                   cols, row_bytes)
        self.shape = (rows, cols)

    def matmul(self, x: np.ndarray) -> np.ndarray:
        return self.kernels.matmul(self, x)

    def rows_f32(self, ids) -> np.ndarray:
        from ..quants import dequantize
        ids = np.asarray(ids, np.int64).reshape(-1)
        out = np.empty((ids.size, self.cols), np.float32)
        raw = np.empty(self.row_bytes, np.uint8)
        for i, r in enumerate(ids):
            self.kernels.rt.read_into(self.off + int(r) * self.row_bytes, raw)
            out[i] = dequantize(raw, self.type, (self.cols,))
        return out

    __getitem__ = rows_f32


def scratch_bytes(cols: int, T: int) -> int:
    """qmatmul's scratch for x [T, cols]: its int16 copy, two floats a block of 32, alignment (qmatmul.c's
    qmatmul_scratch_bytes, computed here to save a call a product)."""
    return 2 * T * cols + 8 * T * (cols // 32) + 64


def kernel_type(ggml_type) -> bool:
    """Whether a tensor of this type gets the kernels (its block size known to them)."""
    try:
        return GGMLType(ggml_type) in KERNEL_TYPES and GGMLType(ggml_type) in GGML_BLOCK
    except ValueError:
        return False
