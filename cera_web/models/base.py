"""The Model protocol the engine drives (both the GPU model and the CPU model implement it), and what every GPU model
shares: uploading weights, the recorded plans, and the per-pass step uniform.

A GPU model builds its forward pass once, as two recorded dispatch lists over the same buffers: one sized for a prompt
chunk (prefill, up to ``chunk`` tokens) and one for a single token (decode). Kernels read the pass's token count
and position from the ``step`` uniform, so running a pass is: write 16 bytes, submit the recorded plan.
"""
from __future__ import annotations

import struct
from typing import Protocol

import numpy as np

from .. import formats, kernels
from ..errors import UnsupportedModelError
from ..gguf import GGML_BLOCK, GGMLType
from .memory import SPLIT_ROWS, gpu_memory, smallest_piece

GPU_TYPES = formats.GPU_TYPES
LOG_SIZE = 256      # token log entries (steps that can run between two readbacks)
REPACK_BYTES = 8 << 20      # bytes of file blocks a slab of the aligned layout's repacking (GPUModel._repack)


class Sampler(Protocol):
    """A model's sampler (its make_sampler()): sampling.GPUSampler on a GPU, models.cpu.CPUSampler on the CPU. While
    the engine sets ``model.sampler_plan = sampler.plan`` each head draws with it (else: argmax)."""

    plan: object

    def set_params(self, params, seed: int, masked: bool = False) -> None:
        """The generation's settings and seed; masked: apply the mask (set_mask before each step)."""

    def set_history(self, ids) -> None:
        """The sequence so far (the repetition penalty's window)."""

    def set_mask(self, words) -> None:
        """The allowed tokens of the next draw: a uint32 bitset over the vocabulary (grammar.Matcher.mask)."""

    async def read_logprobs(self, n: int, top: int) -> list[dict]:
        """The logprobs of the draws into slots 0..n-1: {"logprob", "top_logprobs": [(id, logprob)]} each."""

    def parse_logprobs(self, raw, top: int) -> list[dict]:
        """The logprobs of a Model.collect() result's second part (read with logprobs=True)."""


class Model(Protocol):
    """What the engine knows of a model: the GPU model (GPUModel, models/transformer.py) and the CPU model
    (models/cpu.py: the numpy reference model) implement it; tests/test_model_protocol.py checks both against it.

    A pass writes the token it draws into tokens[0] (the next step's input) and into the token log at its slot
    (out_index); the engine reads slots back. Work is submitted, then read: on a GPU the reads wait for it (and
    ``runs_ahead``: the host may submit more meanwhile); the CPU model computes at submission."""

    spec: object                # the file's ModelSpec
    vocab: int
    chunk: int                  # prompt tokens a prefill pass takes at most
    context_size: int           # KV cache positions
    kv_cache: str               # the KV cache's element type: "f32", or "f16" (values rounded to halves)
    rewindable: bool            # a pass may restart at any cached position (no running state)
    passes: int                 # forward passes run so far (the engine notices passes it did not run)
    max_steps_per_read: int     # token log slots: decode steps the engine may submit between two reads
    runs_ahead: bool            # submitted work runs while the host goes on (a GPU): worth keeping work in flight
    sampler_plan: object        # set by the engine: the sampler's plan (draw with it), or None (argmax)

    def prefill(self, ids, pos0: int, with_head: bool) -> None:
        """Submit a prompt chunk at positions pos0...; with_head: draw its next token (into slot 0)."""

    def decode(self, pos: int, out_index: int) -> None:
        """Submit a decode step: the last drawn token at position pos; its successor into slot out_index."""

    def set_next(self, token: int) -> None:
        """Make ``token`` the next decode step's input, as if it was the last drawn (after a verify pass)."""

    verify_rows: int            # tokens a verify() pass takes at most

    def verify(self, ids, pos0: int) -> None:
        """Submit a pass over ids (2..verify_rows tokens: the last drawn token and drafts) at positions pos0...,
        with the token drawn after each of them into slots 0..len(ids)-1 (speculative decoding's check): the
        argmax, or with a sampler_plan the draw a decode step at that position would make given ids before it
        (its random number, its penalties). The running state (conv layers) is then past every one of ids."""

    async def read_log(self, n: int) -> list[int]:
        """The tokens of slots 0..n-1, once the work submitted is done."""

    def encode_forward(self, out_index: int):
        """A decode step's forward pass up to the logits, prepared ahead (send_forward runs it)."""

    def send_forward(self, encoded, pos: int, out_index: int) -> None:
        """Run an encode_forward() pass on the last drawn token at position pos."""

    def encode_sample(self, out_index: int, logprobs: bool):
        """The draw from the last forward pass into slot out_index (with the sampler_plan) and the read of its
        token (and logprobs), prepared ahead: send() it, or discard() it."""

    def encode_read(self, base: int, n: int, logprobs: bool):
        """The read of slots base..base+n-1 (tokens, and logprobs when asked), to send() after the steps."""

    def send(self, encoded):
        """Submit an encode_sample() / encode_read() result; returns the pending read, for collect()."""

    def discard(self, encoded) -> None:
        """Drop an encode_sample() / encode_read() result that will not be sent."""

    async def collect(self, pending) -> tuple[list[int], object]:
        """(the tokens of a pending read, its logprobs for Sampler.parse_logprobs or None)."""

    def keep_state(self, step: int) -> bool:
        """Steps ran past a stop: keep the running state as after step ``step`` of the last read (-1: before its
        first); False when it cannot (the cached positions are then lost)."""

    def state_sizes(self, n: int) -> list[int]:
        """Bytes of each part of the state of an n-token sequence, in layer order: an attention layer's K rows and
        V rows [0, n) ([n, kv_heads * head_dim] in the cache's element type), a conv layer's rolling state
        ([l_cache - 1, hidden] float32: the B*x values of positions n - l_cache + 1 .. n - 1, oldest first, zeros
        before position 0). The same layout on every backend (cera_web.snapshot writes it to files)."""

    async def read_state(self, n: int, at_mark: bool = False) -> list[bytes]:
        """The parts (state_sizes) of the sequence held: KV rows [0, n); the conv states as they are now (n is
        then the position processed last), or with at_mark as mark() kept them."""

    def write_state(self, parts: list, n: int) -> None:
        """Make the held sequence the n tokens of ``parts`` (read_state's layout); the mark holds it too."""

    def mark(self) -> None:
        """Keep the running state as it is now (conv layers; nothing to keep without any)."""

    def restore_mark(self) -> None:
        """Set the running state back to what mark() kept."""

    def make_sampler(self) -> Sampler:
        """The sampler of this model's head (made once)."""

    def memory(self) -> dict | None:
        """GPU bytes held: {weights, kv_cache, other, total, buffers}; None on the CPU."""

    def split_tensors(self) -> dict:
        """{tensor: [(buffer, first row, rows)]} of the weights split across GPU buffers."""


class Recorder:
    """Collects (pipeline, bind group, workgroups) triples; kernels are compiled through the device's cache."""

    def __init__(self, dev):
        self.dev = dev
        self.dispatches = []
        self.labels = []          # what each dispatch computes (tensor or kernel name), for profiling

    def add(self, wgsl: str, buffers: list, groups: tuple, label: str = ""):
        pipe = self.dev.pipeline(wgsl, label)
        self.dispatches.append((pipe, self.dev.bind(pipe, buffers), groups))
        self.labels.append(label)

    def finish(self):
        plan = self.dev.record(self.dispatches)
        plan.recorder = self
        return plan


class GPUModel:
    """Weights on the GPU, the step uniform, the token buffers and running passes (models/transformer.py builds the
    layers on top). Implements Model."""

    runs_ahead = True       # the GPU runs submitted work while the host goes on
    sampler_plan = None     # set by the engine: a plan submitted right after the head (sampling; cera_web.sampling)
    passes = 0              # forward passes set up so far (the engine notices passes it did not run itself)

    @property
    def kv16(self) -> bool:
        """The KV cache holds f16 (kv_cache "f16")."""
        return self.kv_cache == "f16"

    def __init__(self, dev, gguf, source, spec, *, context_size: int, chunk: int, on_progress=None,
                 kv_cache: str = "f32"):
        self.dev = dev
        self.tuning = kernels.Tuning.from_env()     # the CERA_WEB_* switches of the kernel choices, read once
        self.kv_cache = kv_cache
        self.gguf = gguf
        self.spec = spec
        self.vocab = spec.vocab
        self.rewindable = spec.rewindable     # see Model.rewindable (models/__init__.py)
        self.source = source
        self.context_size = context_size
        self.chunk = chunk
        self.on_progress = on_progress
        self.weights = {}         # label -> GPU buffer of every packed weight (a split tensor: one per row range)
        self._staging = self._slab = None     # the aligned layout's repacking (made on first use, see _repack)
        self._pieces = {}         # tensor name -> [(buffer, first row, rows)]
        self._uploaded = 0
        self._to_upload = 0
        self.step = dev.create_buffer(16, kind="uniform", label="step")
        self.tokens = dev.create_buffer(4 * chunk, label="tokens")
        self.log = dev.create_buffer(4 * LOG_SIZE, label="token log")

    # -- weights ---------------------------------------------------------------------------------------------------
    def plan_upload(self, names):
        """Check the tensors exist and are runnable; count the bytes for progress (each tensor once; the 1-D ones,
        norm gains and such, are small and go up as float32 vectors, outside the count)."""
        for name in dict.fromkeys(names):
            info = self.gguf.tensor(name)
            if info.type not in GPU_TYPES:
                raise UnsupportedModelError(
                    f"tensor {name!r} is stored as {info.type.name}, which has no GPU kernel yet "
                    f"(supported: {', '.join(sorted(t.name for t in GPU_TYPES))})")
            if len(info.shape) > 1:
                self._to_upload += info.nbytes

    @property
    def buffer_limit(self) -> int:
        """The most bytes one weight buffer may hold: the device's storage-binding limit (a kernel binds a buffer
        whole), and its maximum buffer size."""
        limits = self.dev.limits
        return min(int(limits.get("max-storage-buffer-binding-size", 1 << 27)),
                   int(limits.get("max-buffer-size", 1 << 28)))

    def pieces(self, name: str) -> list:
        """Tensor ``name`` on the GPU as [(buffer, first row, rows)], exactly as packed in the file (uploaded on
        first use). One buffer when it fits the device's buffer limit; otherwise consecutive ranges of whole rows,
        each in its own buffer: a multiple of SPLIT_ROWS rows each (the last one shorter), so every range starts on
        a 4-byte boundary whatever the row size, as evenly as the limit allows. Kernels then run once per range
        (matmul writes the range's outputs at its row offset; the embedding lookup serves the ids in its range)."""
        parts = self._pieces.get(name)
        if parts is None:
            info = self.gguf.tensor(name)
            limit = self.buffer_limit
            rows = info.shape[-1] if len(info.shape) > 1 else 1
            row_bytes = info.nbytes // rows
            if info.nbytes <= limit:
                ranges = [(0, rows)]
            else:
                need = smallest_piece(info)
                if need > limit:
                    raise UnsupportedModelError(
                        f"tensor {name!r} ({info.type.name}, shape {list(info.shape)}) needs GPU buffers of at least "
                        f"{need} bytes ({SPLIT_ROWS} rows), but this GPU binds at most {limit} bytes at once: use a "
                        f"GPU or browser with a larger maxStorageBufferBindingSize")
                most = limit // row_bytes // SPLIT_ROWS * SPLIT_ROWS
                count = -(-rows // most)
                per = -(-rows // count // SPLIT_ROWS) * SPLIT_ROWS           # <= most: most is a multiple too
                ranges = [(r0, min(per, rows - r0)) for r0 in range(0, rows, per)]
            parts = []
            for r0, n in ranges:
                label = name if len(ranges) == 1 else f"{name}[{r0}:{r0 + n}]"
                buf = self._weight_buffer(info.type, [(info.offset + r0 * row_bytes, n * row_bytes)], label,
                                          self.aligned(name))
                self.weights[label] = buf
                parts.append((buf, r0, n))
            self._pieces[name] = parts
        return parts

    def split_tensors(self) -> dict:
        """{tensor name: [(buffer, first row, rows)]} of the tensors uploaded as several buffers."""
        return {name: parts for name, parts in self._pieces.items() if len(parts) > 1}

    def record_embed(self, rec, T: int, name: str = "token_embd.weight"):
        """x[t] = row tokens[t] of the embedding table ``name``: one lookup per buffer the table is split into (the
        first also writes the zero rows of ids outside every range; see embed.wgsl)."""
        info = self.gguf.tensor(name)
        hidden, vocab = info.shape[0], info.shape[1]
        parts = self.pieces(name)
        for buf, r0, n in parts:
            rec.add(kernels.embed(info.type, hidden, n, row0=r0, vocab=vocab, scale=self.spec.embed_scale,
                                  aligned=self.aligned(name)),
                    [buf, self.tokens, self.x, self.step],
                    (-(-hidden // 512), T, 1), "embed" if len(parts) == 1 else f"embed[{r0}:{r0 + n}]")

    def stacked(self, names):
        """One buffer holding the rows of several same-type, same-width weights one after another (Q/K/V, gate/up),
        so one dispatch computes them all; None when they cannot share a buffer (types or widths differ)."""
        if not self.stackable(names):
            return None
        key = "+".join(names)
        buf = self.weights.get(key)
        if buf is None:
            infos = [self.gguf.tensor(n) for n in names]
            buf = self._weight_buffer(infos[0].type, [(i.offset, i.nbytes) for i in infos], key, self.aligned(names[0]))
            self.weights[key] = buf
        return buf

    def stackable(self, names) -> bool:
        """Whether stacked(names) makes a buffer: one type, one width, whole words, within one binding."""
        infos = [self.gguf.tensor(n) for n in names]
        return (len({i.type for i in infos}) == 1 and len({i.shape[0] for i in infos}) == 1
                and not any(i.nbytes % 4 for i in infos) and sum(i.nbytes for i in infos) <= self.buffer_limit)

    def runs(self, names) -> list[tuple[list, object]]:
        """names cut into runs of neighbours computed by one product: [(run, its stacked buffer, or None for a run of
        one weight)], the runs as long as stacked() allows (Q4_K_M files: Q and K stacked, V, of Q6_K in some
        layers, alone; one dispatch fewer a layer than three)."""
        out, run = [], [names[0]]
        for name in names[1:]:
            if self.stackable(run + [name]):
                run.append(name)
            else:
                out.append(run)
                run = [name]
        out.append(run)
        return [(r, self.stacked(r) if len(r) > 1 else None) for r in out]

    def aligned(self, name: str) -> bool:
        """Whether weight ``name`` is on the GPU in the aligned layout (formats.Aligned; quants.aligned_layout),
        unless CERA_WEB_ALIGNED=0: Q4_1, Q8_0 and Q6_K matrices. Q6_K's 210-byte blocks make the file's layout a
        matter of unaligned word reads: the aligned one reads 21-24% faster in decode's products (session 7), and
        since matmul_i8 reads its blocks as vec4s (session 10) the prefill GEMM is faster on it too."""
        fmt = self.gguf.tensor(name).type
        return fmt in formats.ALIGNED_TYPES and kernels.aligned_enabled(self.tuning)

    def _weight_buffer(self, fmt, segments, label: str, aligned: bool):
        """A GPU buffer holding the file's byte ranges ``segments`` [(offset, nbytes)] one after another (whole blocks
        of type fmt), in the aligned layout when asked (a multiple of 16 bytes, so that kernels may read it as vec4s),
        else as they are in the file."""
        total = sum(n for _, n in segments)
        if not aligned:
            buf = self.dev.create_buffer(total, label=label)
            at = 0
            for offset, n in segments:
                self._upload(buf, at, offset, n)
                at += n
            return buf
        buf = self.dev.create_buffer(-(-total // 16) * 16, label=label)
        self._repack(fmt, buf, segments)
        return buf

    def _repack(self, fmt, buf, segments):
        """Upload ``segments`` (whole blocks of fmt, each a multiple of 4 bytes unless it is the last) into buf in the
        aligned layout: slab by slab (up to REPACK_BYTES of blocks, an even number of them, so two-byte scales pair
        up into words within a slab and every slab starts on a word of the file) through a staging buffer, each
        repacked by shaders/repack.wgsl. Staging and the slab's parameters are made on first use and dropped by
        build()."""
        block = GGML_BLOCK[fmt][1]
        blocks = sum(n for _, n in segments) // block
        slab = REPACK_BYTES // block // 2 * 2
        if self._staging is None:
            self._staging = self.dev.create_buffer(REPACK_BYTES + 4, label="repack staging")
            self._slab = self.dev.create_buffer(16, kind="uniform", label="repack slab")
        pipe = self.dev.pipeline(kernels.repack(fmt), "repack")
        group = self.dev.bind(pipe, [self._staging, buf, self._slab])
        spans = []       # (first block of the buffer, file offset, blocks) of each segment
        first = 0
        for offset, n in segments:
            spans.append((first, offset, n // block))
            first += n // block
        for i0 in range(0, blocks, slab):
            i1 = min(blocks, i0 + slab)
            for s0, offset, count in spans:        # the slab's bytes, from each segment it overlaps
                a, b = max(i0, s0), min(i1, s0 + count)
                if a < b:
                    self._upload(self._staging, (a - i0) * block, offset + (a - s0) * block, (b - a) * block)
            self.dev.write_buffer(self._slab, struct.pack("<4I", i0, i1 - i0, blocks, 0))
            self.dev.submit([self.dev.record([(pipe, group, kernels.spread(kernels.repack_groups(fmt, i1 - i0)))])])

    def _upload(self, buf, at: int, offset: int, nbytes: int):
        """Copy nbytes of the file from offset into buf at byte at, counting them for the progress report."""
        self.dev.copy_into(buf, at, self.source, offset, nbytes)
        self._uploaded += nbytes
        if self.on_progress:
            self.on_progress("upload", self._uploaded, max(self._to_upload, self._uploaded))

    def vector(self, name: str) -> np.ndarray:
        """A small F32/F16 tensor (norm gains) read into numpy."""
        info = self.gguf.tensor(name)
        raw = self.source.read(info.offset, info.nbytes)
        if info.type == GGMLType.F32:
            return np.frombuffer(raw, np.float32)
        if info.type == GGMLType.F16:
            return np.frombuffer(raw, np.float16).astype(np.float32)
        raise UnsupportedModelError(f"tensor {name!r}: expected F32 or F16, found {info.type.name}")

    def f32_buffer(self, array: np.ndarray, label: str = ""):
        buf = self.dev.create_buffer(array.nbytes, label=label)
        self.dev.write_buffer(buf, np.ascontiguousarray(array, np.float32))
        return buf

    def shape(self, name: str) -> tuple[int, int]:
        """(rows N, row length K) of a 2-D weight (GGUF stores (K, N))."""
        info = self.gguf.tensor(name)
        if len(info.shape) != 2:
            raise UnsupportedModelError(f"tensor {name!r} should be 2-D, has shape {info.shape}")
        return info.shape[1], info.shape[0]

    # -- running -------------------------------------------------------------------------------------------------
    def set_step(self, n_tokens: int, pos0: int, out_index: int = 0):
        self.passes += 1
        self.dev.write_buffer(self.step, struct.pack("<4I", n_tokens, pos0, out_index, pos0 + n_tokens))

    max_steps_per_read = LOG_SIZE     # decode steps the engine may submit between two readbacks

    def _head(self, head):
        return [head, self.sampler_plan] if self.sampler_plan is not None else [head]

    def prefill(self, ids, pos0: int, with_head: bool):
        """Submit one prompt chunk (len(ids) <= chunk) at positions pos0...; with_head: also sample its next token
        into tokens[0] and log[0]."""
        self.dev.write_buffer(self.tokens, np.asarray(ids, np.uint32))
        self.set_step(len(ids), pos0, 0)
        one = len(ids) == 1     # a single token (e.g. a chat turn's reused prompt): the decode plan computes the same
        plans = [self.body_for(len(ids))]
        if with_head:
            plans += self._head(self.plan_head_decode if one else self.plan_head_prefill)
        self.dev.submit(plans, early=not one)

    def decode(self, pos: int, out_index: int):
        """Submit one decode step: the token in tokens[0] at position pos; its successor goes to log[out_index]."""
        self.set_step(1, pos, out_index)
        self.dev.submit([self.plan_decode, *self._head(self.plan_head_decode)], self.step_copies(out_index))

    def set_next(self, token: int):
        self.dev.write_buffer(self.tokens, np.asarray([token], np.uint32))

    # -- a decode step in halves, for constrained decoding (the engine's _Overlapped schedule) ---------------------
    def encode_forward(self, out_index: int):
        """The command buffer of a decode step's forward pass up to the logits (body and head, not the sampler),
        encoded ahead; send_forward runs it."""
        return self.dev.encode([self.plan_decode, self.plan_head_decode], self.step_copies(out_index))

    def send_forward(self, encoded, pos: int, out_index: int):
        """Run an encode_forward() pass on the token in tokens[0] at position pos (its successor's slot out_index)."""
        self.set_step(1, pos, out_index)
        self.dev.send(encoded)

    def encode_sample(self, out_index: int, logprobs: bool):
        """The command buffer that samples the last forward pass (sampler_plan; its token into tokens[0] and
        log[out_index]) and copies that token (and its logprobs slot) for reading back; encoded ahead: send() it,
        or discard() it."""
        return self.dev.encode([self.sampler_plan], read=self._reads(out_index, 1, logprobs))

    def encode_read(self, base: int, n: int, logprobs: bool):
        """The command buffer that copies log[base:base + n] (and those steps' logprobs slots) for reading back."""
        return self.dev.encode([], read=self._reads(base, n, logprobs))

    def _reads(self, base: int, n: int, logprobs: bool) -> list:
        reads = [(self.log, 4 * base, 4 * n)]
        if logprobs:
            buf, offset, size = self._sampler.logprobs_slice(base)
            reads.append((buf, offset, size * n))
        return reads

    def send(self, encoded):
        return self.dev.send(encoded)

    def discard(self, encoded):
        self.dev.discard(encoded)

    async def collect(self, pending) -> tuple[list[int], object]:
        raw = await self.dev.collect(pending)
        return [int(t) for t in memoryview(raw[0]).cast("I")], (raw[1] if len(raw) > 1 else None)

    def step_copies(self, out_index: int) -> list:  # pragma: no cover - abstract
        """Buffer copies to run after decode step out_index of a read (see keep_state)."""
        raise NotImplementedError

    async def read_log(self, n: int) -> list[int]:
        raw = await self.dev.read(self.log, 0, 4 * n)
        return np.frombuffer(raw, np.uint32).tolist()

    _sampler = None

    def make_sampler(self):
        """The sampler of this model's head (shaders/sample.wgsl over the logits buffer), made once."""
        if self._sampler is None:
            from ..sampling import GPUSampler
            self._sampler = GPUSampler.for_model(self)
        return self._sampler

    def memory(self) -> dict:
        """Bytes of GPU memory held: {weights, kv_cache, other, total, buffers} (see models/memory.py)."""
        return gpu_memory(self)

    def build(self):
        """Record the four plans (body and head, for a chunk and for one token)."""
        self.plan_prefill = self.record_body(self.chunk)
        self.plan_decode = self.record_body(1)
        self.plan_head_prefill = self.record_head(self.chunk)
        self.plan_head_decode = self.record_head(1)
        if self._staging is not None:              # every weight is uploaded: the repacking's buffers go
            self.dev.release(self._staging)
            self.dev.release(self._slab)
            self._staging = self._slab = None
        if self.on_progress:                       # everything is on the GPU now, whatever was counted
            done = max(self._uploaded, self._to_upload)
            self.on_progress("upload", done, done)

    def record_body(self, T: int):  # pragma: no cover - abstract
        raise NotImplementedError

    def record_head(self, T: int):  # pragma: no cover - abstract
        raise NotImplementedError
