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

import time
from dataclasses import dataclass, field

from .errors import ContextOverflowError, InputError
from .loading import LoadPlan, plan_load
from .models import load_model
from .pacing import ReadPacer
from .sampling import GREEDY, SamplingParams, StopMatcher, random_seed


@dataclass
class GenerationResult:
    """What one generation produced. ``text`` is exactly the concatenation of the pieces passed to on_token."""

    prompt_tokens: list[int]
    tokens: list[int] = field(default_factory=list)   # generated ids (without an ending end-of-turn or stop token)
    text: str = ""                   # the output text (never contains a stop string)
    stop_reason: str = ""            # "eos" | "stop" | "max_tokens" | "context" | "cancelled" | "grammar"
    stop_sequence: str | int | None = None   # the stop string or stop token id that ended it ("stop")
    seed: int | None = None          # the seed the draws used (None when decoding was greedy)
    cached_tokens: int = 0           # prompt tokens found in the KV cache (not prefilled again)
    drafted: int = 0                 # speculative decoding: tokens drafted (by the draft model or prompt lookup)
    accepted: int = 0                # of those, the ones the model's own greedy choice confirmed
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    host_ms: float = 0.0             # decode time the host spent encoding/submitting (not waiting for the GPU)
    # with params.logprobs: one entry per token of ``tokens``: {"logprob": float, "top_logprobs": [(id, logprob)]}
    logprobs: list | None = None

    @property
    def prefill_tok_s(self) -> float:
        n = len(self.prompt_tokens) - self.cached_tokens
        return n / (self.prefill_ms / 1000) if self.prefill_ms > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        # the first generated token comes out of prefill; the rest are decode steps
        n = max(len(self.tokens) - 1, 0)
        return n / (self.decode_ms / 1000) if self.decode_ms > 0 and n else 0.0

    def as_dict(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "tokens": self.tokens, "text": self.text,
                "stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence, "seed": self.seed,
                "cached_tokens": self.cached_tokens, "drafted": self.drafted, "accepted": self.accepted,
                "prefill_ms": round(self.prefill_ms, 3),
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
    def __init__(self, plan: LoadPlan, model):
        """An engine on a load that plan_load decided and the model load_model built from it (Engine.load does
        both; Engine.from_plan the second)."""
        self.plan = plan
        self.dev = plan.device
        self.gguf = plan.gguf
        self.source = plan.source
        self.model = model
        self.tokenizer = plan.tokenizer
        self.cpu = plan.cpu            # runs the numpy reference model on the CPU (no GPU)
        self.name = plan.gguf.get("general.name") or getattr(plan.source, "name", "model")
        self.backend = self.dev.name
        self.context_size = model.context_size
        self.steps_per_read = None      # decode steps a readback: None adapts to the step time (pacing.ReadPacer)
        self.pacer = ReadPacer()
        self._chat_template = None
        self._cancel = False
        self.on_prefill = None  # on_prefill(done, total): prompt tokens processed of this run's, after each chunk
        self._sampler = None
        self._trie = None       # the vocabulary's byte trie, for grammar masks (built on first use)
        self.overlap = True     # keep work in flight where the model runs ahead (a GPU): the next batch, or under a
                                # grammar the next step's forward pass; False: one batch a readback (benchmarks
                                # compare the two)
        # what the KV cache holds: _cache[p] is the token whose K/V are at position p; valid while model.passes
        # equals _cache_passes (a pass run by anyone else, e.g. a test calling model.prefill, invalidates it)
        self._cache: list[int] = []
        self._cache_passes = -1
        self._mark: list[int] = []      # the tokens whose running state model.mark() kept (conv layers on a GPU)
        self.draft: Engine | None = None     # the draft model of speculative decoding (load_draft)
        self.owns_device = True         # close() destroys the device (a draft model shares its target's)

    @classmethod
    async def load(cls, source, *, device=None, context_size: int | None = None, chunk: int | None = None,
                   on_progress=None, cpu_fallback: bool = True, kv_cache: str = "f32", header=None):
        """Parse a GGUF (a path or a source object), build its tokenizer and upload its weights to the GPU.
        device: a cera_web.gpu device, "cpu" for the numpy reference model on the CPU, or None for the best GPU —
        falling back to the CPU (with a message on stderr) when there is none, unless cpu_fallback is False.
        context_size: KV cache positions; None (not set): 2048, or less where the GPU's buffer limits cannot hold
        that much per layer (the largest context they hold).
        chunk: prompt tokens per prefill pass (default: the device's prefill_chunk: 512 on GPUs, 64 on CPU adapters
        such as SwiftShader, 16 on the CPU; a Stop waits for the chunk in flight).
        kv_cache: the KV cache's element type: "f32" (the default), or "f16": half the memory (twice the context in
        the same bytes, as llama.cpp's default), keys and values rounded to halves as they are cached (logits move
        by ~1e-2; docs/DESIGN.md); on GPUs it needs the shader-f16 feature (UnsupportedModelError without).
        header: the file's header read and checked before (cera_web.loading.check), else it is read here.
        The same as ``await Engine.from_plan(await cera_web.loading.plan_load(source, ...), on_progress)``; a
        failed upload (GPUMemoryError) releases the device made here."""
        plan = await plan_load(source, device=device, cpu_fallback=cpu_fallback, context_size=context_size,
                               chunk=chunk, kv_cache=kv_cache, header=header, on_progress=on_progress)
        try:
            return await cls.from_plan(plan, on_progress)
        except BaseException:
            if device is None and not plan.cpu:
                plan.device.destroy()
            raise

    @classmethod
    async def from_plan(cls, plan: LoadPlan, on_progress=None) -> "Engine":
        """The engine of a planned load (cera_web.loading.plan_load): its weights uploaded, its passes recorded and,
        on a GPU, run once (warm_up). A failed allocation (GPUMemoryError) frees what this load allocated
        (models.load_model)."""
        engine = cls(plan, await load_model(plan, on_progress))
        if not engine.cpu and not engine.dev.is_cpu:
            await engine.warm_up()
        return engine

    async def warm_up(self):
        """Run each plan once (a prompt of verify_rows + 1 tokens with its head, a decode step, a 2-token verify pass,
        their readbacks) and make the sampler, so that what a GPU driver does at a pipeline's first use is part of
        the load, not of the first reply's wait (on the H200 the first chat message after a load took 0.3-0.6 s
        natively and 0.7 s in the page, later ones 6-65 ms: session 17, BENCHMARKS.md); the verify pass is also the
        body of short prompt chunks and of prompt lookup's rounds, on by default on GPUs. Nothing of it stays: its KV
        rows are overwritten by the next prompt, which the prompt cache does not match against them (model.passes
        moved). Engine.from_plan calls it on GPUs; software adapters skip it (there a pass costs seconds and nothing
        is compiled at first use)."""
        m = self.model
        t = self.tokenizer.bos_id if self.tokenizer.bos_id is not None else 0
        n = min(m.chunk, m.verify_rows + 1, m.context_size - 3)    # past a short chunk: the prefill plan (body_for)
        if n >= 2:                  # (not in a context of a few tokens)
            m.prefill([t] * n, 0, with_head=True)
            m.decode(n, 1)
            await m.read_log(2)
            m.verify([t, t], n + 1)
            await m.read_log(2)
        m.make_sampler()

    async def load_draft(self, source, **kw) -> "Engine":
        """Load a draft model for speculative decoding (cera_web.speculative) onto this engine's device and keep it
        as ``engine.draft``: greedy generations then let it propose tokens that this model checks several at a time
        (the output is this model's own). It must have this model's tokenizer (InputError otherwise; nothing is
        kept then). kw: Engine.load's (context_size defaults to this engine's). ``engine.draft.close()`` then
        ``engine.draft = None`` drops it (its GPU buffers stay on the shared device until this engine closes)."""
        kw.setdefault("context_size", self.context_size)
        draft = await Engine.load(source, device=self.dev, cpu_fallback=False, **kw) if not self.cpu else \
            await Engine.load(source, device="cpu", **kw)
        draft.owns_device = False
        if not draft.tokenizer.same_vocabulary(self.tokenizer):
            draft.close()
            raise InputError(f"the draft model {draft.name!r} has another tokenizer than {self.name!r}: a draft model "
                             f"must share the model's vocabulary (e.g. a smaller model of the same family)")
        if self.draft is not None:
            self.draft.close()
        self.draft = draft
        return draft

    def close(self):
        """Release the GPU memory this engine holds (its device and every buffer on it, its draft model's too)."""
        if self.draft is not None:
            self.draft.close()
            self.draft = None
        if self.dev is not None and self.owns_device:
            self.dev.destroy()
        self.dev = None
        self.model = None       # the plans and weights go with the device; drop the Python side too
        if hasattr(self.source, "close"):
            self.source.close()

    def cancel(self):
        """Stop the running generation: prefill stops after the chunk in flight, decode after the steps in flight,
        and no token read back after the request is emitted. It returns with stop_reason "cancelled"."""
        self._cancel = True
        if self.draft is not None:
            self.draft.cancel()

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

    async def generate(self, prompt, params=None, *, on_token=None, chat: bool = False, reuse_cache: bool = True,
                       stop_at_eos: bool | None = None, response_format=None, grammar=None,
                       **settings) -> GenerationResult:
        """Generate from ``prompt`` (text, or token ids). Settings: ``params`` (a SamplingParams or a dict) and/or
        keyword arguments named like its fields (max_tokens=..., temperature=..., seed=..., stop=[...], ...).
        With no settings at all decoding is greedy (cera_web.sampling.GREEDY) and stops after 256 tokens.

        on_token(id, text) streams the output: ``text`` is the newly released text, "" while text that could start a
        stop string is held back; after the last token one more call may release held text with the id of the
        end-of-turn/stop token that ended the reply. The texts add up to result.text.
        chat: wrap a text prompt as one user message in the model's chat template.
        reuse_cache: skip prefilling the longest prefix of the prompt that the engine's state (KV cache, conv state)
        already holds (from the last generation, or a restored snapshot: cera_web.snapshot); result.cached_tokens
        counts it. On by default, as in llama.cpp's server: positions computed in other passes (decode steps, other
        chunkings) move the logits by float rounding only (~1e-6), as chunk sizes do. False recomputes the prompt.
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

    def _resume(self, ids) -> int:
        """How many leading tokens of ``ids`` the engine's state holds, leaving at least one to prefill for the
        logits. With a running state (conv layers on the GPU) only where the state at that point is held: the end
        of the cache, or the model's mark (the prompt's end but one, set by _prefill; restored here)."""
        if self.model.passes != self._cache_passes:
            return 0
        n = 0
        for a, b in zip(self._cache, ids):
            if a != b:
                break
            n += 1
        if self.model.rewindable:
            return min(n, len(ids) - 1)
        if n == len(self._cache) < len(ids):
            return n
        m = len(self._mark)
        if 0 < m <= n and m < len(ids) and self._mark == self._cache[:m]:
            self.model.restore_mark()
            return m
        return 0

    def _restorable(self, prefix) -> tuple[int, bool]:
        """(tokens, whether at the mark) of the longest prefix of ``prefix`` (None: the whole cache) that the engine
        holds and whose state the model can hand out exactly."""
        if self.model.passes != self._cache_passes:
            return 0, False
        n = len(self._cache)
        if prefix is not None:
            n = next((i for i, (a, b) in enumerate(zip(self._cache, prefix)) if a != b), min(n, len(prefix)))
        if self.model.rewindable or n == len(self._cache):
            return n, False
        m = len(self._mark)
        ok = 0 < m <= n and self._mark == self._cache[:m]
        return (m, True) if ok else (0, False)

    async def save_state(self, prefix=None, extra: dict | None = None) -> bytes:
        """A snapshot (cera_web.snapshot) of the sequence the engine holds: of its longest prefix shared with the
        token ids ``prefix`` (default: all of it) whose state can be restored exactly (any prefix on most models;
        with conv layers on the GPU the whole sequence or the last prompt but its last token). ``extra``: JSON to
        keep with it. Save after a generate() of the prompt to keep: ``await engine.save_state(prompt_ids)``."""
        from .snapshot import pack
        n, at_mark = self._restorable(prefix)
        parts = await self.model.read_state(n, at_mark) if n else []
        return pack(self, self._cache[:n], parts, extra)

    def restore_state(self, data) -> list[int]:
        """Make a snapshot's state the engine's (the next prompt that starts with its tokens prefills only the
        rest); returns its tokens. SnapshotError (one line) when it was made for another model, cache type or
        context, or is damaged: nothing changes then."""
        from .snapshot import unpack
        tokens, parts, _ = unpack(self, data)
        if tokens:
            try:
                self.model.write_state(parts, len(tokens))
            except BaseException:
                self._cache_passes = -1         # half written (a lost device, say): hold nothing
                raise
        self._cache, self._mark = list(tokens), list(tokens)
        self._cache_passes = self.model.passes
        return tokens

    async def generate_ids(self, ids: list[int], params: SamplingParams, *, on_token=None,
                           reuse_cache: bool = True, grammar=None) -> GenerationResult:
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
        start = self._resume(ids) if reuse_cache else 0
        result.cached_tokens = start
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
        """Prefill, then decode until a stop: the shape of gpt-fast's generate, one loop for every model and
        setting. How decode steps are submitted and read back is a schedule's (_schedule); what the tokens mean
        (_Stream: stop tokens, stop strings, the grammar, limits) and what the KV cache then holds are here, once.
        matcher: the grammar's cera_web.grammar.Matcher, or None."""
        t0 = time.perf_counter()
        first = (await self.model.read_log(1))[0] if await self._prefill(ids, start) else None
        if self._cancel:
            first = None
        lps = await self._read_logprobs(1, params) if first is not None else None
        result.prefill_ms = (time.perf_counter() - t0) * 1000
        if first is None:
            result.stop_reason = "cancelled"
            return
        stream = _Stream(self, params, result, out, matcher)
        t1 = time.perf_counter()
        pos = len(ids)          # position of the token just drawn (the next step's input)
        stop = stream.accept(first, pos, lps[0])
        prev = first
        steps = self._schedule(pos, prev, params, result, matcher)
        while not stop:
            read = await steps.next()
            n = len(read.tokens)
            lps = self._sampler.parse_logprobs(read.logprobs, params.top_logprobs) if params.logprobs else [None] * n
            stop, used, pos = self._take(stream, read.tokens, lps, pos)
            self._cache += ([prev] + read.tokens[:-1])[:used]   # step i's input, now in the cache (K/V rows, state)
            prev = read.tokens[-1]
            # steps ran past the stop (in this read, or submitted after it): their cache rows are overwritten later;
            # a running state (conv layers) is taken back to the last step used, or the cache is lost
            if stop and (used < n or read.ahead) and not steps.keep(read, used):
                self._cache = []
        await steps.close()
        result.decode_ms = (time.perf_counter() - t1) * 1000
        result.stop_reason = stop

    def _schedule(self, pos: int, prev: int, params, result, matcher):
        """How the decode steps from position pos (its input: prev, the token just drawn) are submitted: drafted
        and checked several at a time where speculative decoding applies (cera_web.speculative); else with work
        kept in flight where the model runs ahead of the host (a GPU; engine.overlap); under a grammar a step's draw
        waits for its mask."""
        from .speculative import Speculative, drafter
        draft = drafter(self, params) if matcher is None and not params.logprobs else None
        if draft is not None:
            return Speculative(self, pos, self._cache + [prev], params, result, draft)
        ahead = self.overlap and self.model.runs_ahead
        if matcher is not None and ahead:
            return _Overlapped(self, pos, params, result, matcher)
        return _Batches(self, pos, params, result, depth=2 if ahead and matcher is None else 1, matcher=matcher)

    async def _prefill(self, ids, start: int) -> bool:
        """Submit ids[start:] chunk by chunk; the last chunk also draws the first new token (into slot 0: read it
        with model.read_log(1)); False when cancelled. Waiting for each chunk but the last gives cancel() (and the
        browser's event loop) a point to come in.
        A model with a running state (not rewindable) prefills the last token alone and marks the state before it,
        so that the prompt can be resumed there (_resume: the same prompt again, another reply to it)."""
        model = self.model
        self._cache = list(ids[:start])
        pos = start
        split = not model.rewindable and len(ids) - start >= 2
        if self.on_prefill:
            self.on_prefill(0, len(ids) - start)
        while pos < len(ids):
            end = len(ids) - 1 if split and pos < len(ids) - 1 else len(ids)
            part = ids[pos:min(pos + model.chunk, end)]
            last = pos + len(part) >= len(ids)
            model.prefill(part, pos, with_head=last)
            pos += len(part)
            self._cache = list(ids[:pos])
            if split and pos == len(ids) - 1:
                model.mark()
                self._mark = list(self._cache)
            if not last:
                await model.read_log(1)
                if self._cancel:
                    return False
                if self.on_prefill:
                    self.on_prefill(pos - start, len(ids) - start)
        return True

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

    async def _read_logprobs(self, n: int, params) -> list:
        """The logprobs of the last n steps read ({"logprob", "top_logprobs"} each), or n Nones when not asked."""
        if not params.logprobs:
            return [None] * n
        return await self._sampler.read_logprobs(n, params.top_logprobs)


class _Read:
    """One readback of decode steps: their tokens, their logprobs (for Sampler.parse_logprobs; None when not asked),
    the slot of the first, and whether steps were submitted after them (they ran past a stop among these)."""

    __slots__ = ("tokens", "logprobs", "base", "ahead")

    def __init__(self, tokens, logprobs, base: int, ahead: bool):
        self.tokens, self.logprobs, self.base, self.ahead = tokens, logprobs, base, ahead


class _Batches:
    """Decode steps in batches (sized by the engine's pacer), each batch's tokens read back at once. depth 2: the
    next batch is submitted before this one's tokens are awaited, so the GPU does not wait for the readback, the
    host's handling of the tokens or its encoding of the next batch; batches then alternate the two halves of the
    slots (token log, logprobs, conv-state snapshots), so a batch's results are not overwritten by the one after it
    before they are read. depth 1 (the CPU model, engine.overlap off, or a grammar): each batch is read before the
    next is submitted; under a grammar (matcher) a batch is one step, its mask written first (a step's mask depends
    on the token before it, known only once read back)."""

    def __init__(self, engine, pos: int, params, result, depth: int, matcher=None, size: int | None = None,
                 more=None):
        self.engine, self.model, self.params, self.result = engine, engine.model, params, result
        self.depth, self.matcher, self.size = depth, matcher, size      # size: steps a batch (None: the pacer's)
        self.more = more        # None, or called before each batch after the first with the steps submitted so far:
        self.steps = 0          # False ends the batches there (speculative decoding's plain stretches)
        self.most = self.model.max_steps_per_read // depth                              # slots a batch may use
        self.budget = min(params.max_tokens - len(result.tokens), engine.context_size - pos)    # steps worth running
        self.nxt, self.base = pos, 0        # the next step's position, and the slot it writes
        self.flight = []                    # batches submitted and not read: (pending read, steps, slot base, sent)
        self.last = None                    # when the last batch came back

    def submit(self):
        engine, model = self.engine, self.model
        h = time.perf_counter()
        if self.matcher is not None:
            n = 1
            engine._sampler.set_mask(self.matcher.mask())
        else:
            n = max(1, min(self.size or engine.pacer.next(engine.steps_per_read), self.most, self.budget))
        for i in range(n):
            model.decode(self.nxt + i, self.base + i)
        self.flight.append((model.send(model.encode_read(self.base, n, self.params.logprobs)), n, self.base, h))
        self.result.host_ms += (time.perf_counter() - h) * 1000
        self.nxt, self.budget, self.steps = self.nxt + n, self.budget - n, self.steps + n
        if self.depth > 1:
            self.base = self.most - self.base

    async def next(self) -> _Read:
        if self.last is None:
            self.submit()
            self.last = time.perf_counter()
        while len(self.flight) < self.depth and not self._ends():
            self.submit()                   # the next batch goes to the GPU before this one's tokens are read
        pending, n, base, sent = self.flight.pop(0)
        tokens, logprobs = await self.model.collect(pending)
        now = time.perf_counter()
        if self.matcher is None:            # a constrained step (its mask made on the host) says nothing of the GPU
            self.engine.pacer.observe(n, now - max(self.last, sent))   # the GPU ran it since the last came back
        self.last = now
        return _Read(tokens, logprobs, base, bool(self.flight))

    def _ends(self) -> bool:
        """Whether no batch may follow: the budget is spent, or more() said so (then the budget is set to 0)."""
        if self.budget > 0 and self.more is not None and not self.more(self.steps):
            self.budget = 0
        return self.budget <= 0

    @property
    def done(self) -> bool:
        """Every batch was submitted and read."""
        return not self.flight and self._ends()

    def keep(self, read: _Read, used: int) -> bool:
        """Steps ran past a stop after ``used`` steps of ``read``: keep the state as after them (Model.keep_state)."""
        return self.model.keep_state(read.base + used - 1 if used else -1)

    async def close(self):
        for pending, *_ in self.flight:     # a batch past the stop: its read is collected (and dropped)
            await self.model.collect(pending)


class _Overlapped:
    """Decode under a grammar, one token a readback, with the host's work overlapped with the GPU's. A step's
    forward pass does not depend on the grammar, only its draw does (through the mask, which depends on the token
    before it). So per token: write the mask, submit the draw with the read of its token, submit the next step's
    forward pass (encoded while the previous token was awaited; its input is the token just drawn, on the GPU),
    encode the one after, then wait for the token. The GPU runs the forward pass while the host reads the token,
    advances the grammar and makes the next mask. Every drawn token had its own step's mask: nothing is drawn ahead
    of the grammar. Steps alternate two slots (token log, logprobs, conv-state snapshots)."""

    def __init__(self, engine, pos: int, params, result, matcher):
        self.engine, self.model, self.params, self.result, self.matcher = engine, engine.model, params, result, matcher
        self.pos, self.slot = pos, 0        # the position of the next step's input token, and its slot
        self.forward = self.sampling = None
        self.ahead = False                  # the next step's forward pass was submitted

    async def next(self) -> _Read:
        model, slot, logprobs = self.model, self.slot, self.params.logprobs
        h = time.perf_counter()
        if self.sampling is None:           # the first step's forward pass
            model.send_forward(model.encode_forward(slot), self.pos, slot)
            self.forward, self.sampling = model.encode_forward(1 - slot), model.encode_sample(slot, logprobs)
        self.engine._sampler.set_mask(self.matcher.mask())
        pending = model.send(self.sampling)
        # the next step's pass, if a next step can follow: its input is this step's token (on the GPU)
        self.ahead = self.pos + 1 < self.engine.context_size and len(self.result.tokens) + 1 < self.params.max_tokens
        if self.ahead:
            model.send_forward(self.forward, self.pos + 1, 1 - slot)
            self.forward, self.sampling = model.encode_forward(slot), model.encode_sample(1 - slot, logprobs)
        self.result.host_ms += (time.perf_counter() - h) * 1000
        tokens, lps = await model.collect(pending)
        self.pos, self.slot = self.pos + 1, 1 - slot
        return _Read(tokens, lps, slot, self.ahead)

    keep = _Batches.keep

    async def close(self):
        if self.ahead:
            self.model.discard(self.sampling)


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


def __getattr__(name: str):
    """``from cera_web.engine import ChatSession`` (as README writes it): ChatSession lives in session.py, which
    imports this module; it is imported when asked for, so the two modules do not import each other."""
    if name == "ChatSession":
        from .session import ChatSession
        return ChatSession
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
