"""The generation API: load a GGUF onto the GPU, then generate text, or hold a multi-turn chat.

    engine = await Engine.load("model.gguf")
    result = await engine.generate("The capital of France is", max_tokens=16, on_token=print_piece)  # greedy
    result = await engine.generate("Once upon a time", SamplingParams(seed=7), max_tokens=32)         # sampled

    chat = ChatSession(engine, system="You are a helpful assistant.")
    reply = await chat.send("What is the capital of France?", on_token=show)   # SamplingParams() defaults
    reply = await chat.send("And of Italy?")        # prefills only the new turn: the KV cache is kept
    reply = await chat.regenerate(seed=3)           # another answer to the last message
    chat.reset()

The same code runs in CPython (wgpu-py) and in Pyodide (the browser's WebGPU). Decoding runs entirely on the GPU: the
head's argmax (greedy) or the sampler (shaders/sample.wgsl) writes each token where the next step's embedding lookup
reads it; the host reads back only the token ids, ``steps_per_read`` steps at a time. Stop strings, stop tokens and
the stream are handled on the host as the ids arrive.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from .errors import ContextOverflowError, GPUUnavailableError, InputError, UnsupportedModelError
from .gguf import parse_gguf
from .gpu import get_device
from .models import check_kv_cache, load_model, model_spec
from .pacing import ReadPacer
from .sampling import GREEDY, SamplingParams, StopMatcher, random_seed
from .source import FileSource


@dataclass
class GenerationResult:
    """What one generation produced. ``text`` is exactly the concatenation of the pieces passed to on_token."""

    prompt_tokens: list[int]
    tokens: list[int] = field(default_factory=list)   # generated ids (without an ending end-of-turn or stop token)
    text: str = ""                   # the output text (never contains a stop string)
    stop_reason: str = ""            # "eos" | "stop" | "max_tokens" | "context" | "cancelled" | "grammar"
    stop_sequence: str | int | None = None   # the stop string or stop token id that ended it ("stop")
    seed: int | None = None          # the seed the draws used (None when decoding was greedy)
    reused_tokens: int = 0           # prompt tokens found in the KV cache (not prefilled again)
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    host_ms: float = 0.0             # decode time the host spent encoding/submitting (not waiting for the GPU)
    # with params.logprobs: one entry per token of ``tokens``: {"logprob": float, "top_logprobs": [(id, logprob)]}
    logprobs: list | None = None

    @property
    def prefill_tok_s(self) -> float:
        n = len(self.prompt_tokens) - self.reused_tokens
        return n / (self.prefill_ms / 1000) if self.prefill_ms > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        # the first generated token comes out of prefill; the rest are decode steps
        n = max(len(self.tokens) - 1, 0)
        return n / (self.decode_ms / 1000) if self.decode_ms > 0 and n else 0.0

    def as_dict(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "tokens": self.tokens, "text": self.text,
                "stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence, "seed": self.seed,
                "reused_tokens": self.reused_tokens, "prefill_ms": round(self.prefill_ms, 3),
                "decode_ms": round(self.decode_ms, 3), "prefill_tok_s": round(self.prefill_tok_s, 2),
                "decode_tok_s": round(self.decode_tok_s, 2)}


class _Output:
    """The host side of one generation's output: UTF-8 assembly, stop strings held back, the stream callback."""

    def __init__(self, engine, result, params, on_token):
        from .tokenizer import StreamDecoder
        self.result = result
        self.decoder = StreamDecoder(engine.tokenizer)
        self.matcher = StopMatcher(params.stop)
        self.on_token = on_token
        self.pieces = []

    def emit(self, tok: int, text: str):
        self.pieces.append(text)
        if self.on_token:
            self.on_token(tok, text)

    def token(self, tok: int, final: bool) -> bool:
        """Take a generated token; final: no token follows it. Returns whether it completed a stop string."""
        self.result.tokens.append(tok)
        piece = self.decoder.push(tok)
        if final:
            piece += self.decoder.flush()
        text, hit = self.matcher.push(piece)
        if final and not hit:
            text += self.matcher.flush()
        self.emit(tok, text)
        if hit:
            self.result.stop_sequence = self.matcher.matched
        return hit

    def end(self, tok: int):
        """The stream ended at an end-of-turn or stop token ``tok`` (not part of the output): release the held text
        with it."""
        text, hit = self.matcher.push(self.decoder.flush())
        if not hit:
            text += self.matcher.flush()
        if text:
            self.emit(tok, text)

    def finish(self):
        self.result.text = "".join(self.pieces)
        return self.result


class Engine:
    def __init__(self, dev, gguf, source, model, tokenizer):
        self.dev = dev
        self.gguf = gguf
        self.source = source
        self.model = model
        self.tokenizer = tokenizer
        self.name = gguf.get("general.name") or getattr(source, "name", "model")
        self.backend = dev.name
        self.context_size = model.context_size
        self.steps_per_read = None      # decode steps a readback: None adapts to the step time (pacing.ReadPacer)
        self.pacer = ReadPacer()
        self._chat_template = None
        self._cancel = False
        self.on_prefill = None  # on_prefill(done, total): prompt tokens processed of this run's, after each chunk
        self._sampler = None
        self._trie = None       # the vocabulary's byte trie, for grammar masks (built on first use)
        self.overlap = True     # constrained decoding overlaps host and GPU work (_decode_constrained); False:
                                # one plain step per readback (benchmarks compare the two)
        # what the KV cache holds: _cache[p] is the token whose K/V are at position p; valid while model.passes
        # equals _cache_passes (a pass run by anyone else, e.g. a test calling model.prefill, invalidates it)
        self._cache: list[int] = []
        self._cache_passes = -1

    @classmethod
    async def load(cls, source, *, device=None, context_size: int = 2048, chunk: int | None = None,
                   on_progress=None, cpu_fallback: bool = True, kv_cache: str = "f32"):
        """Parse a GGUF (a path or a source object), build its tokenizer and upload its weights to the GPU.
        device: a cera_web.gpu device, "cpu" for the numpy reference model on the CPU, or None for the best GPU —
        falling back to the CPU (with a message on stderr) when there is none, unless cpu_fallback is False.
        chunk: prompt tokens per prefill pass (default: the device's prefill_chunk: 512 on GPUs, 64 on CPU adapters
        such as SwiftShader, 16 on the CPU; a Stop waits for the chunk in flight).
        kv_cache: the KV cache's element type: "f32" (the default), or "f16": half the memory (twice the context in
        the same bytes, as llama.cpp's default), keys and values rounded to halves as they are cached (logits move
        by ~1e-2; docs/DESIGN.md); on GPUs it needs the shader-f16 feature (UnsupportedModelError without)."""
        check_kv_cache(kv_cache)
        if not hasattr(source, "read"):
            source = FileSource(source)
        if on_progress:
            on_progress("parse", 0, 1)
        gguf = parse_gguf(source.read, source.size, name=getattr(source, "name", None))
        from .tokenizer import Tokenizer
        tokenizer = Tokenizer.from_gguf(gguf)
        model_spec(gguf)            # the architecture and its tensors check out before a device is made
        if context_size < 1:
            raise InputError(f"context_size must be positive, got {context_size}")
        emb = gguf.tensors.get("token_embd.weight")
        n_rows = emb.shape[1] if emb is not None and len(emb.shape) == 2 else None   # other shapes: the model says
        if n_rows is not None and n_rows != tokenizer.vocab_size:
            raise UnsupportedModelError(
                f"the tokenizer has {tokenizer.vocab_size} tokens but the embedding table has {n_rows} rows: the "
                f"file's vocabulary and weights disagree; re-convert the model")
        if device == "cpu":
            device = None
        elif device is None:
            try:
                device = await get_device()
            except GPUUnavailableError as e:
                if not cpu_fallback:
                    raise
                print(f"cera_web: {e}; running on the CPU instead (slow)", file=sys.stderr)
        if device is None:                  # the CPU fallback: the numpy reference model
            from .models.cpu import CPUDevice
            device = CPUDevice()
        if chunk is None:
            chunk = device.prefill_chunk
        chunk = max(1, min(chunk, context_size))
        model = load_model(device, gguf, source, context_size=context_size, chunk=chunk, on_progress=on_progress,
                           kv_cache=kv_cache)
        return cls(device, gguf, source, model, tokenizer)

    def close(self):
        """Release the GPU memory this engine holds (its device and every buffer on it)."""
        if self.dev is not None:
            self.dev.destroy()
            self.dev = None
        self.model = None       # the plans and weights go with the device; drop the Python side too
        if hasattr(self.source, "close"):
            self.source.close()

    def cancel(self):
        """Stop the running generation: prefill stops after the chunk in flight, decode after the steps in flight,
        and no token read back after the request is emitted. It returns with stop_reason "cancelled"."""
        self._cancel = True

    @property
    def chat(self):
        """The OpenAI-shaped chat API: ``await engine.chat.completions.create(messages=[...], ...)``
        (cera_web.openai_api)."""
        from .openai_api import _Chat
        return _Chat(self)

    @property
    def completions(self):
        """The OpenAI-shaped text API: ``await engine.completions.create(prompt=..., ...)``."""
        from .openai_api import Completions
        return Completions(self)

    @property
    def chat_template(self):
        """The model's chat template (cera_web.template.ChatTemplate; ChatML when the file has none)."""
        if self._chat_template is None:
            from .template import ChatTemplate
            self._chat_template = ChatTemplate.from_metadata(self.gguf.metadata)
        return self._chat_template

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """Token ids of a conversation rendered by the model's chat template."""
        text = self.chat_template.render(messages, add_generation_prompt=add_generation_prompt)
        return self.tokenizer.encode(text, add_special=False, parse_special=True)

    def encode_prompt(self, prompt, chat: bool = False) -> list[int]:
        if isinstance(prompt, str):
            if not prompt.strip() and not chat:
                raise InputError("the prompt is empty: type some text to continue")
            if chat:
                if not prompt.strip():
                    raise InputError("the message is empty: type a question or instruction")
                return self.encode_chat([{"role": "user", "content": prompt}])
            return self.tokenizer.encode(prompt)
        ids = [int(i) for i in prompt]
        if not ids:
            raise InputError("the prompt has no tokens")
        bad = [i for i in ids if not 0 <= i < self.model.vocab]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary (0..{self.model.vocab - 1})")
        return ids

    @staticmethod
    def settings(params=None, settings: dict | None = None, base: SamplingParams = GREEDY,
                 dict_base: SamplingParams | None = None) -> SamplingParams:
        """SamplingParams from a SamplingParams, a dict (missing keys from ``dict_base``, default SamplingParams())
        or None (``base``), with ``settings`` (keyword arguments) applied on top."""
        if params is None:
            params = base
        elif isinstance(params, dict):
            params = SamplingParams.from_dict(params, dict_base)
        elif not isinstance(params, SamplingParams):
            raise InputError(f"params must be a SamplingParams or a dict of settings, not a {type(params).__name__}")
        return params.replace(**settings) if settings else params

    async def generate(self, prompt, params=None, *, on_token=None, chat: bool = False, reuse_cache: bool = False,
                       stop_at_eos: bool | None = None, response_format=None, grammar=None,
                       **settings) -> GenerationResult:
        """Generate from ``prompt`` (text, or token ids). Settings: ``params`` (a SamplingParams or a dict) and/or
        keyword arguments named like its fields (max_tokens=..., temperature=..., seed=..., stop=[...], ...).
        With no settings at all decoding is greedy (cera_web.sampling.GREEDY) and stops after 256 tokens.

        on_token(id, text) streams the output: ``text`` is the newly released text, "" while text that could start a
        stop string is held back; after the last token one more call may release held text with the id of the
        end-of-turn/stop token that ended the reply. The texts add up to result.text.
        chat: wrap a text prompt as one user message in the model's chat template.
        reuse_cache: skip prefilling the longest prefix that the KV cache already holds from the last generation.
        stop_at_eos: the older spelling of ``ignore_eos=not stop_at_eos``.
        response_format / grammar: constrain the output (cera_web.json_schema.constraint): {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"schema": ...}}, {"type": "grammar", "grammar": GBNF}, or GBNF text
        / a compiled Grammar as ``grammar``. The reply is then complete text of the grammar unless max_tokens, the
        context or a stop string cut it short; it ends with stop_reason "grammar" when nothing can follow."""
        if stop_at_eos is not None:
            settings["ignore_eos"] = not stop_at_eos
        params = self.settings(params, settings)
        constraint = _constraint(response_format, grammar)
        ids = self.encode_prompt(prompt, chat)
        return await self.generate_ids(ids, params, on_token=on_token, reuse_cache=reuse_cache, grammar=constraint)

    def token_trie(self):
        """The vocabulary as a byte trie (cera_web.grammar.TokenTrie), built once per model."""
        if self._trie is None:
            from .grammar import TokenTrie
            self._trie = TokenTrie.from_tokenizer(self.tokenizer)
        return self._trie

    def _reusable(self, ids) -> int:
        """How many leading tokens of ``ids`` the KV cache holds (leaving at least one to prefill for the logits)."""
        if self.model.passes != self._cache_passes:
            return 0
        n = 0
        for a, b in zip(self._cache, ids):
            if a != b:
                break
            n += 1
        if self.model.rewindable:
            return min(n, len(ids) - 1)
        # a running state (LFM2) holds everything processed: usable only when that is a strict prefix of ids
        return n if n == len(self._cache) < len(ids) else 0

    async def generate_ids(self, ids: list[int], params: SamplingParams, *, on_token=None,
                           reuse_cache: bool = False, grammar=None) -> GenerationResult:
        """generate() for a prompt already tokenized (validated ids) with validated settings; grammar: a compiled
        cera_web.grammar.Grammar or None."""
        self._cancel = False
        ctx, model = self.context_size, self.model
        if len(ids) >= ctx:
            raise ContextOverflowError(
                f"the prompt has {len(ids)} tokens but the context holds {ctx}; shorten the prompt or load the "
                f"model with a larger context size")
        bad = [t for t in params.stop_token_ids if t >= model.vocab]
        if bad:
            raise InputError(f"stop token id {bad[0]} is outside the vocabulary (0..{model.vocab - 1})")
        result = GenerationResult(prompt_tokens=list(ids))
        if params.max_tokens <= 0:
            result.stop_reason = "max_tokens"
            return result
        start = self._reusable(ids) if reuse_cache else 0
        result.reused_tokens = start
        matcher = None
        if grammar is not None:
            from .grammar import Matcher
            matcher = Matcher(grammar, self.token_trie())
        # else the head's argmax is the answer; a grammar's mask is applied by the sampler, greedy or not
        if params.temperature > 0 or params.penalised or params.logit_bias or params.logprobs or matcher is not None:
            if self._sampler is None:
                self._sampler = model.make_sampler()
            seed = params.seed if params.seed is not None else random_seed()
            result.seed = None if params.greedy else seed
            self._sampler.set_params(params, seed, masked=matcher is not None)
            self._sampler.set_history(ids)
            if matcher is not None:
                self._sampler.set_mask(matcher.mask())         # for the token that prefill's head draws
            model.sampler_plan = self._sampler.plan
        if params.logprobs:
            result.logprobs = []
        out = _Output(self, result, params, on_token)
        ok = False
        try:
            await self._run(ids, start, params, result, out, matcher)
            ok = True
        finally:
            model.sampler_plan = None
            self._cache_passes = model.passes if ok else -1
        return out.finish()

    async def _run(self, ids, start, params, result, out, matcher=None):
        """Prefill, then decode batches until a stop (the shape of gpt-fast's generate). matcher: the grammar's
        cera_web.grammar.Matcher (each step's mask written before it is submitted), or None."""
        t0 = time.perf_counter()
        first = await self._prefill(ids, start)
        lps = await self._read_logprobs(1, params) if first is not None else None
        result.prefill_ms = (time.perf_counter() - t0) * 1000
        if first is None:
            result.stop_reason = "cancelled"
            return
        stream = _Stream(self, params, result, out, matcher)
        t1 = time.perf_counter()
        pos = len(ids)          # position of the token just sampled (the next step's input)
        stop = stream.accept(first, pos, lps[0])
        prev = first
        if matcher is not None and not stop and self.overlap and hasattr(self.model, "encode_forward"):
            stop = await self._decode_constrained(pos, prev, params, result, stream, matcher)
        elif matcher is None and not stop and self.overlap and getattr(self.model, "on_gpu", False):
            stop = await self._decode_pipelined(pos, prev, params, result, stream)
        while not stop:
            n = max(1, min(self.pacer.next(self.steps_per_read), params.max_tokens - len(result.tokens),
                           self.context_size - pos, self.model.max_steps_per_read))
            if matcher is not None:
                # a step's mask depends on the token before it, known only once read back: one step per read
                n = 1
            new = await self._decode_batch(pos, n, result, matcher)
            lps = await self._read_logprobs(n, params)
            stop, used, pos = self._take(stream, new, lps, pos)
            self._cache += ([prev] + new[:-1])[:used]      # step i's input, now in the cache (K/V rows, conv state)
            prev = new[-1]
            if used < n and not self.model.keep_state(used - 1):   # a running state is taken back to step used - 1
                self._cache = []
        result.decode_ms = (time.perf_counter() - t1) * 1000
        result.stop_reason = stop

    async def _prefill(self, ids, start: int) -> int | None:
        """Prefill ids[start:] chunk by chunk; the last chunk also samples the first new token, returned (None when
        cancelled). Waiting for each chunk gives cancel() (and the browser's event loop) a point to come in."""
        model = self.model
        self._cache = list(ids[:start])
        pos = start
        if self.on_prefill:
            self.on_prefill(0, len(ids) - start)
        while pos < len(ids):
            part = ids[pos:pos + model.chunk]
            last = pos + len(part) >= len(ids)
            model.prefill(part, pos, with_head=last)
            pos += len(part)
            self._cache = list(ids[:pos])
            if not last:
                await model.read_log(1)
                if self._cancel:
                    return None
                if self.on_prefill:
                    self.on_prefill(pos - start, len(ids) - start)
        first = (await model.read_log(1))[0]
        return None if self._cancel else first

    async def _decode_batch(self, pos: int, n: int, result, matcher=None) -> list[int]:
        """Submit n decode steps from position pos (each step's token feeds the next on the GPU), then read their
        tokens back at once. matcher: write its mask for the (single) step first."""
        h = time.perf_counter()
        if matcher is not None:
            self._sampler.set_mask(matcher.mask())
        for i in range(n):
            self.model.decode(pos + i, i)
        result.host_ms += (time.perf_counter() - h) * 1000
        new = await self.model.read_log(n)
        if matcher is None:         # a constrained step (its mask made on the host) says nothing of the step time
            self.pacer.observe(n, time.perf_counter() - h)
        return new

    async def _decode_constrained(self, pos: int, prev: int, params, result, stream, matcher) -> str:
        """Decode under a grammar, one token a readback, with the host's work overlapped with the GPU's. A step's
        forward pass does not depend on the grammar, only its sampler does (through the mask, which depends on the
        token before it). So per token: write the mask, submit the sampler with the read of its token, submit the
        next step's forward pass (encoded while the previous token was awaited; its input is the token just drawn,
        on the GPU), encode the one after, then wait for the token. The GPU runs the forward pass while the host
        reads the token, advances the grammar and makes the next mask. Every drawn token had its own step's mask:
        nothing is drawn ahead of the grammar. A forward pass run past a stop is discarded (its cache row is
        overwritten later; a running conv state is taken back to the last used step: keep_state). Returns why it
        stopped."""
        model, sampler, dev = self.model, self._sampler, self.dev

        def sample(slot):
            return model.encode_sample(slot, [sampler.logprobs_slice(slot)] if params.logprobs else [])

        slot = 0            # decode steps alternate two slots: log/logprobs entries, conv-state snapshots
        h = time.perf_counter()
        model.send_forward(model.encode_forward(slot), pos, slot)
        forward, sampling = model.encode_forward(1), sample(slot)
        result.host_ms += (time.perf_counter() - h) * 1000
        stop = ""
        while not stop:
            h = time.perf_counter()
            sampler.set_mask(matcher.mask())
            pending = dev.send(sampling)
            # the next step's pass, if a next step can follow: input = this step's token (on the GPU)
            ahead = pos + 1 < self.context_size and len(result.tokens) + 1 < params.max_tokens
            if ahead:
                model.send_forward(forward, pos + 1, 1 - slot)
                forward, sampling = model.encode_forward(slot), sample(1 - slot)   # encoded while the GPU works
            result.host_ms += (time.perf_counter() - h) * 1000
            raw = await dev.collect(pending)
            tok = int.from_bytes(raw[0], "little")
            lp = sampler.parse_logprobs(raw[1], params.top_logprobs)[0] if params.logprobs else None
            pos += 1
            if self._cancel:
                stop = "cancelled"      # the token read after the request is dropped, and so is its step's input
                kept = model.keep_state(-1)
            else:
                stop = stream.accept(tok, pos, lp)
                self._cache.append(prev)
                kept = model.keep_state(slot) if stop and ahead else True
            if not kept:
                self._cache = []
            prev, slot = tok, 1 - slot
        if ahead:
            dev.discard(sampling)
        return stop

    def _take(self, stream, new, lps, pos):
        """Give a batch's tokens (drawn for positions pos + 1 ...) to the stream until it stops or a cancel comes:
        (why it stopped, or "", the steps whose input stays part of the sequence, the position reached). Tokens read
        after a cancel are dropped; tokens after a stop are discarded (their cache rows are overwritten later)."""
        for i, tok in enumerate(new):
            pos += 1
            if self._cancel:
                return "cancelled", i, pos
            stop = stream.accept(tok, pos, lps[i])
            if stop:
                return stop, i + 1, pos
        return "", len(new), pos

    async def _decode_pipelined(self, pos: int, prev: int, params, result, stream) -> str:
        """Decode without a grammar: batches of steps (sized by the pacer), each batch's tokens read back at once, and
        the next batch submitted before the current one's tokens are awaited, so the GPU does not wait for the
        readback, the host's handling of the tokens or its encoding of the next batch (the loop in _run waits for
        each read before it encodes the next batch). Batches alternate the two halves of the token log, of the
        logprob slots and of the conv-state snapshots (steps' out_index), so a batch's results are not overwritten
        by the batch after it before they are read. Steps run past a stop, in its batch or in the batch after it,
        are discarded as in _run (their cache rows are overwritten later; a running state goes back with
        keep_state). Returns why it stopped."""
        model, dev, sampler = self.model, self.dev, self._sampler
        half = model.max_steps_per_read // 2
        budget = min(params.max_tokens - len(result.tokens), self.context_size - pos)   # steps worth submitting
        flight = []          # batches submitted and not read: (pending read, steps, slot base, time sent)
        nxt, base = pos, 0   # the next step's position, and the half of the slots it writes

        def submit():
            nonlocal nxt, base, budget
            h = time.perf_counter()
            n = max(1, min(self.pacer.next(self.steps_per_read), half, budget))
            for i in range(n):
                model.decode(nxt + i, base + i)
            reads = [(model.log, 4 * base, 4 * n)]
            if params.logprobs:
                buf, offset, size = sampler.logprobs_slice(base)
                reads.append((buf, offset, size * n))
            flight.append((dev.send(dev.encode([], read=reads)), n, base, h))
            result.host_ms += (time.perf_counter() - h) * 1000
            nxt, base, budget = nxt + n, half - base, budget - n

        submit()
        last = time.perf_counter()
        stop = ""
        while not stop:
            if budget > 0:
                submit()                      # the next batch goes to the GPU before this one's tokens are read
            pending, n, b, sent = flight.pop(0)
            raw = await dev.collect(pending)
            now = time.perf_counter()
            self.pacer.observe(n, now - max(last, sent))      # the GPU ran this batch since the last one came back
            last = now
            new = [int(t) for t in memoryview(raw[0]).cast("I")]
            lps = sampler.parse_logprobs(raw[1], params.top_logprobs) if params.logprobs else [None] * n
            stop, used, pos = self._take(stream, new, lps, pos)
            self._cache += ([prev] + new[:-1])[:used]
            prev = new[-1]
            if stop and (used < n or flight) and not model.keep_state(b + used - 1 if used else -1):
                self._cache = []
        for pending, *_ in flight:            # a batch past the stop: its read is collected (and dropped)
            await dev.collect(pending)
        return stop

    async def _read_logprobs(self, n: int, params) -> list:
        """The logprobs of the last n steps read ({"logprob", "top_logprobs"} each), or n Nones when not asked."""
        if not params.logprobs:
            return [None] * n
        return await self._sampler.read_logprobs(n, params.top_logprobs)


class _Stream:
    """The stop bookkeeping of one generation: end-of-turn and stop tokens, stop strings, max_tokens, context, and
    under a grammar (matcher) its state and its end."""

    def __init__(self, engine, params, result, out, matcher=None):
        self.eot = frozenset() if params.ignore_eos else engine.tokenizer.eot_ids
        if matcher is not None:     # under a grammar an end-of-turn token is allowed only when the text is complete
            self.eot = self.eot | matcher.trie.eos_set
        self.stop_ids = frozenset(params.stop_token_ids)
        self.max_tokens, self.ctx = params.max_tokens, engine.context_size
        self.result, self.out, self.matcher = result, out, matcher

    def accept(self, tok: int, pos: int, lp=None) -> str:
        """Take one sampled token (for position pos; lp: its logprobs or None); return why to stop ("" to go on)."""
        result, out, matcher = self.result, self.out, self.matcher
        if matcher is not None and tok not in self.eot and not matcher.advance(tok):
            raise RuntimeError(f"the sampler drew token {tok}, which the grammar forbids here (a bug in the mask "
                               f"path)")
        if tok in self.eot or tok in self.stop_ids:
            out.end(tok)
            if tok in self.eot:
                return "eos"
            result.stop_sequence = tok
            return "stop"
        if lp is not None:
            result.logprobs.append(lp)
        done = matcher is not None and matcher.finished      # nothing can follow: the text is complete
        final = len(result.tokens) + 1 >= self.max_tokens or pos >= self.ctx or done
        if out.token(tok, final):
            return "stop"
        if done:
            return "grammar"
        if len(result.tokens) >= self.max_tokens:
            return "max_tokens"
        return "context" if pos >= self.ctx else ""


def _constraint(response_format, grammar):
    """The compiled grammar of a generation's response_format / grammar arguments (None: unconstrained)."""
    if response_format is None and grammar is None:
        return None
    from .json_schema import constraint
    return constraint(response_format, grammar)


from .session import ChatSession  # noqa: E402,F401  (ChatSession lives in session.py; README imports it from here)
