"""The CPU fallback: the numpy reference model (cera_web.reference) behind the GPU models' interface, for machines
with no WebGPU adapter (also inside Pyodide). Slow but exact float32; the engine reports its backend as
"CPU (numpy reference)".

The matrices stay quantized: cera_web.cpu_kernels multiplies their GGUF blocks in a WebAssembly SIMD module
(16-bit activations, integer products; docs/DESIGN.md "The CPU path's kernels"), the browser's WebAssembly in
Pyodide and wasmtime natively (the same binary). Without the built module (or natively without wasmtime) the
products are float32 numpy, after a one-line notice; CERA_WEB_CPU_KERNELS=0 asks for those.

It keeps the GPU models' contract: ``prefill`` / ``decode`` compute the next token at once (argmax, or the numpy
twin of sample.wgsl when a sampler is set) and ``read_log`` returns it.
"""
from __future__ import annotations

import asyncio
import os

import numpy as np

from ..reference import KVCache, ReferenceModel
from ..sampling import RING, SamplingParams, logprobs_numpy, sample_numpy, uniform
from .base import LOG_SIZE


def kernels_wanted() -> bool:
    """Whether a CPU model uses the WebAssembly kernels: yes, unless CERA_WEB_CPU_KERNELS=0 (the float32 numpy
    products: the reference's own arithmetic)."""
    return os.environ.get("CERA_WEB_CPU_KERNELS", "") != "0"


async def make_kernels():
    """A cera_web.cpu_kernels.Kernels instance for a new CPU model, or None (float32 numpy products)."""
    if not kernels_wanted():
        return None
    from ..cpu_kernels import load_kernels
    return await load_kernels()


class CPUDevice:
    """Stands in for a GPU device: a name, counters and limits (nothing is on a GPU)."""

    name = "CPU (numpy reference)"
    is_cpu = True
    limits: dict = {}
    features: set = set()
    calls = dispatches = submits = 0
    prefill_chunk = 16        # ~2 s a pass for SmolLM2 in Pyodide on a 2-core box: a Stop waits at most that

    def __init__(self):
        self.live_buffers = []

    def destroy(self):
        pass


class CPUSampler:
    """The host twin of GPUSampler: the settings, the seed, the ring of recent tokens and the logprobs of each slot."""

    def __init__(self):
        self.plan = self            # the engine sets model.sampler_plan = sampler.plan
        self.params = SamplingParams(temperature=0.0)
        self.seed = 0
        self.recent: list[int] = []
        self.allowed = None         # a grammar's mask as a boolean array, or None
        self.slots = [None] * LOG_SIZE      # (logprob, top logprobs) of the draw into each slot

    def set_params(self, params: SamplingParams, seed: int, masked: bool = False):
        self.params, self.seed = params, seed
        self.allowed = None

    async def read_logprobs(self, n: int, top: int) -> list[dict]:
        return self.parse_logprobs(self.slots[:n], top)

    def parse_logprobs(self, raw, top: int) -> list[dict]:
        return [{"logprob": lp, "top_logprobs": tops[:top]} for lp, tops in raw]

    def set_mask(self, words):
        self.allowed = np.unpackbits(np.asarray(words, np.uint32).view(np.uint8), bitorder="little").astype(bool)

    def set_history(self, ids):
        self.recent = list(ids[-RING:])


class CPUModel:
    """ReferenceModel behind the Model protocol (models/base.py). Work runs when it is submitted (runs_ahead is
    False): a "pending read" is the values themselves, and prepared (encoded) work is a function to call."""

    runs_ahead = False
    max_steps_per_read = LOG_SIZE

    def __init__(self, dev, gguf, source, spec, *, context_size: int, chunk: int, on_progress=None,
                 kv_cache: str = "f32", kernels=None):
        self.dev = dev
        self.spec = spec
        self.kv_cache = kv_cache
        if on_progress:
            on_progress("weights", 0, 0)        # no GPU upload (the weights go to the kernels or to float32: no count)
        self.kernels = kernels          # cera_web.cpu_kernels.Kernels holding the quantized matrices, or None
        self.ref = ReferenceModel.from_gguf(gguf, source, spec, kv_cache, kernels=kernels)
        self.ref.context_length = context_size      # the engine's context, as the GPU model's (past training too)
        self.rewindable = True    # the reference keeps every position's B*x for its conv layers (like K/V)
        self.vocab = spec.vocab
        self.context_size = context_size
        self.chunk = chunk
        self.sampler_plan = None
        self.passes = 0
        self.logits = None
        self._log = [0] * LOG_SIZE
        self._next = 0          # the last drawn token (the next step's input)
        self._drawn = 0         # the position the next draw is for (its random number's)
        self._sampler = None

    def make_sampler(self):
        if self._sampler is None:
            self._sampler = CPUSampler()
        return self._sampler

    def _draw(self, out_index: int):
        """Draw the token after self.logits into slot out_index: argmax, or the numpy twin of sample.wgsl."""
        logits, s = self.logits, self.sampler_plan
        if s is None:
            tok = int(np.argmax(logits))
        else:
            window = s.params.repeat_window
            recent = s.recent[-window:] if window else []
            allowed = None if s.allowed is None else s.allowed[:len(logits)]
            tok = sample_numpy(logits, s.params, recent, uniform(s.seed, self._drawn), allowed)
            if s.params.logprobs:
                lp = logprobs_numpy(logits, s.params, recent, allowed)
                order = np.argsort(-lp, kind="stable")[:20]
                s.slots[out_index] = (float(lp[tok]), [(int(i), float(lp[i])) for i in order if lp[i] > -1e30])
            s.recent = (s.recent + [tok])[-RING:]
        self._next = self._log[out_index] = tok

    def _forward(self, ids, pos0: int):
        self.passes += 1
        self.logits = self.ref.forward(list(ids), pos0, last_only=True)[-1]
        self._drawn = pos0 + len(ids)

    def prefill(self, ids, pos0: int, with_head: bool):
        self._forward(ids, pos0)
        if with_head:
            self._draw(0)

    def decode(self, pos: int, out_index: int):
        self._forward([self._next], pos)
        self._draw(out_index)

    def set_next(self, token: int):
        self._next = token

    verify_rows = 16

    def verify(self, ids, pos0: int):
        self.passes += 1
        rows = self.ref.forward(list(ids), pos0)
        for i, row in enumerate(rows):      # each row drawn as a decode step at its position would draw it
            self.logits, self._drawn = row, pos0 + i + 1
            self._draw(i)

    def encode_forward(self, out_index: int):
        return None             # nothing to prepare: send_forward computes

    def send_forward(self, encoded, pos: int, out_index: int):
        self._forward([self._next], pos)

    def encode_sample(self, out_index: int, logprobs: bool):
        def sample():
            self._draw(out_index)
            return self._read(out_index, 1, logprobs)
        return sample

    def encode_read(self, base: int, n: int, logprobs: bool):
        return lambda: self._read(base, n, logprobs)

    def _read(self, base: int, n: int, logprobs: bool):
        return self._log[base:base + n], (self._sampler.slots[base:base + n] if logprobs else None)

    def send(self, encoded):
        return encoded()

    def discard(self, encoded):
        pass

    async def collect(self, pending):
        # Nothing to wait for, but yield to the event loop: in a browser worker this is where a Stop message (and
        # the page's other messages) come in, as they do while a GPU model awaits its readback.
        await asyncio.sleep(0)
        return pending

    async def read_log(self, n: int) -> list[int]:
        return (await self.collect(self._read(0, n, False)))[0]

    def keep_state(self, step: int) -> bool:
        return True             # rewindable: nothing to restore

    # -- the sequence state as bytes (Model.state_sizes: the GPU model's layout) -------------------------------
    def _kv_type(self):
        return np.float16 if self.kv_cache == "f16" else np.float32

    def state_sizes(self, n: int) -> list[int]:
        s, width = self.spec, np.dtype(self._kv_type()).itemsize
        return [size for layer in s.layers for size in ((n * width * layer.kv_heads * s.head_dim,) * 2
                                                        if layer.attention else (4 * (s.l_cache - 1) * s.hidden,))]

    async def read_state(self, n: int, at_mark: bool = False) -> list[bytes]:
        parts, D = [], self.spec.l_cache - 1
        for c in self.ref.cache:
            if isinstance(c, KVCache):
                parts += [c.k[:n].astype(self._kv_type()).tobytes(), c.v[:n].astype(self._kv_type()).tobytes()]
            else:       # the last D positions' B*x, oldest first, zeros before position 0
                rows = np.zeros((D, c.bx.shape[1]), np.float32)
                got = c.bx[max(0, n - D):n]
                rows[D - len(got):] = got
                parts.append(rows.tobytes())
        return parts

    def write_state(self, parts: list, n: int) -> None:
        D, it = self.spec.l_cache - 1, iter(parts)
        for c in self.ref.cache:
            if isinstance(c, KVCache):
                k, v = (np.frombuffer(next(it), self._kv_type()).reshape(n, *c.k.shape[1:]).astype(np.float32)
                        for _ in "kv")
                c.update(0, k, v)
            else:
                hist = np.zeros((n, c.bx.shape[1]), np.float32)
                rows = np.frombuffer(next(it), np.float32).reshape(D, -1)
                take = min(n, D)
                hist[n - take:] = rows[D - take:]
                c.update(0, hist)
        self.ref.position = n

    def mark(self) -> None:
        pass                    # rewindable: any position can be gone back to

    def restore_mark(self) -> None:
        pass

    def memory(self):
        return None           # nothing on a GPU

    def split_tensors(self) -> dict:
        return {}
