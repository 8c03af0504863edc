"""The CPU fallback: the numpy reference model (cera_web.reference) behind the GPU models' interface, for machines
with no WebGPU adapter (also inside Pyodide). Slow but exact float32; the engine reports its backend as
"CPU (numpy reference)".

It keeps the GPU models' contract: ``prefill`` / ``decode`` compute the next token at once (argmax, or the numpy
twin of sample.wgsl when a sampler is set) and ``read_log`` returns it.
"""
from __future__ import annotations

import asyncio

import numpy as np

from ..reference import ReferenceModel
from ..sampling import RING, SamplingParams, logprobs_numpy, sample_numpy, uniform
from .base import LOG_SIZE


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
    """The host twin of GPUSampler: the settings, the seed and the ring of recent tokens."""

    def __init__(self):
        self.plan = self            # the engine sets model.sampler_plan = sampler.plan
        self.params = SamplingParams(temperature=0.0)
        self.seed = 0
        self.recent: list[int] = []
        self.allowed = None         # a grammar's mask as a boolean array, or None

    def set_params(self, params: SamplingParams, seed: int, masked: bool = False):
        self.params, self.seed = params, seed
        self.allowed = None
        self.pending = []           # logprobs of the steps not read yet

    async def read_logprobs(self, n: int, top: int) -> list[dict]:
        got, self.pending = self.pending[-n:], []
        return [{"logprob": lp, "top_logprobs": tops[:top]} for lp, tops in got]

    def set_mask(self, words):
        self.allowed = np.unpackbits(np.asarray(words, np.uint32).view(np.uint8), bitorder="little").astype(bool)

    def set_history(self, ids):
        self.recent = list(ids[-RING:])


class CPUModel:
    """ReferenceModel with the Model interface the engine drives (models/__init__.py)."""

    on_gpu = False

    def __init__(self, dev, gguf, source, spec, *, context_size: int, chunk: int, on_progress=None,
                 kv_cache: str = "f32"):
        self.dev = dev
        self.spec = spec
        self.kv_cache = kv_cache
        if on_progress:
            on_progress("weights", 0, 0)        # no GPU upload: the weights are unpacked to float32 (no count)
        self.ref = ReferenceModel.from_gguf(gguf, source, spec, kv_cache)
        self.rewindable = spec.rewindable     # the reference's conv state is not snapshotted: no rewinding
        self.vocab = spec.vocab
        self.context_size = context_size
        self.chunk = chunk
        self.sampler_plan = None
        self.passes = 0
        self.logits = None
        self._log = [0] * LOG_SIZE
        self._next = 0

    def make_sampler(self):
        return CPUSampler()

    def _head(self, logits: np.ndarray, pos: int) -> int:
        s = self.sampler_plan
        if s is None:
            return int(np.argmax(logits))
        window = s.params.repeat_window
        recent = s.recent[-window:] if window else []
        allowed = None if s.allowed is None else s.allowed[:len(logits)]
        tok = sample_numpy(logits, s.params, recent, uniform(s.seed, pos), allowed)
        if s.params.logprobs:
            lp = logprobs_numpy(logits, s.params, recent, allowed)
            order = np.argsort(-lp, kind="stable")[:20]
            s.pending.append((float(lp[tok]), [(int(i), float(lp[i])) for i in order if lp[i] > -1e30]))
        s.recent = (s.recent + [tok])[-RING:]
        return tok

    def prefill(self, ids, pos0: int, with_head: bool):
        self.passes += 1
        logits = self.ref.forward(list(ids), pos0, last_only=True)[-1]
        if with_head:
            self.logits = logits
            self._next = self._log[0] = self._head(logits, pos0 + len(ids))

    max_steps_per_read = LOG_SIZE

    def keep_state(self, step: int) -> bool:
        return self.rewindable          # the reference's LFM2 conv state is not snapshotted

    def decode(self, pos: int, out_index: int):
        self.passes += 1
        logits = self.ref.forward([self._next], pos, last_only=True)[-1]
        self.logits = logits
        self._next = self._log[out_index] = self._head(logits, pos + 1)

    async def read_log(self, n: int) -> list[int]:
        # Nothing to wait for, but yield to the event loop: in a browser worker this is where a Stop message (and
        # the page's other messages) come in, as they do while a GPU model awaits its readback.
        await asyncio.sleep(0)
        return self._log[:n]

    def memory(self):
        return None           # nothing on a GPU

    def split_tensors(self) -> dict:
        return {}
