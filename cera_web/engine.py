"""The generation API: load a GGUF onto the GPU, then prefill a prompt and decode tokens.

    engine = await Engine.load("model.gguf")
    result = await engine.generate("The capital of France is", max_tokens=16, on_token=print_piece)

The same code runs in CPython (wgpu-py) and in Pyodide (the browser's WebGPU). Greedy decoding runs entirely on the
GPU: the argmax kernel writes each token where the next step's embedding lookup reads it; the host reads back only
the token ids, ``steps_per_read`` steps at a time.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from .errors import ContextOverflowError, InputError
from .gguf import parse_gguf
from .gpu import get_device
from .models import model_class
from .models.base import LOG_SIZE
from .source import FileSource


@dataclass
class GenerationResult:
    prompt_tokens: list[int]
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    stop_reason: str = ""            # "eos" | "max_tokens" | "context" | "cancelled"
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    host_ms: float = 0.0             # decode time the host spent encoding/submitting (not waiting for the GPU)

    @property
    def prefill_tok_s(self) -> float:
        return len(self.prompt_tokens) / (self.prefill_ms / 1000) if self.prefill_ms > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        # the first generated token comes out of prefill; the rest are decode steps
        n = max(len(self.tokens) - 1, 0)
        return n / (self.decode_ms / 1000) if self.decode_ms > 0 and n else 0.0

    def as_dict(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "tokens": self.tokens, "text": self.text,
                "stop_reason": self.stop_reason, "prefill_ms": round(self.prefill_ms, 3),
                "decode_ms": round(self.decode_ms, 3), "prefill_tok_s": round(self.prefill_tok_s, 2),
                "decode_tok_s": round(self.decode_tok_s, 2)}


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
        self.steps_per_read = 4
        self._chat_template = None
        self._cancel = False

    @classmethod
    async def load(cls, source, *, device=None, context_size: int = 2048, chunk: int = 64, on_progress=None):
        """Parse a GGUF (a path or a source object), build its tokenizer and upload its weights to the GPU."""
        if not hasattr(source, "read"):
            source = FileSource(source)
        if on_progress:
            on_progress("parse", 0, 1)
        gguf = parse_gguf(source.read, source.size, name=getattr(source, "name", None))
        from .tokenizer import Tokenizer
        tokenizer = Tokenizer.from_gguf(gguf)
        cls_ = model_class(gguf.architecture)
        if context_size < 1:
            raise InputError(f"context_size must be positive, got {context_size}")
        dev = device or await get_device()
        model = cls_(dev, gguf, source, context_size=context_size, chunk=chunk, on_progress=on_progress)
        return cls(dev, gguf, source, model, tokenizer)

    def close(self):
        """Release the GPU memory this engine holds (its device and every buffer on it)."""
        if self.dev is not None:
            self.dev.destroy()
            self.dev = None
        if hasattr(self.source, "close"):
            self.source.close()

    def cancel(self):
        """Stop the running generate() after the step in flight; it returns with stop_reason "cancelled"."""
        self._cancel = True

    @property
    def chat_template(self):
        """The model's chat template (cera_web.chat.ChatTemplate; ChatML when the file has none)."""
        if self._chat_template is None:
            from .chat import ChatTemplate
            self._chat_template = ChatTemplate.from_metadata(self.gguf.metadata)
        return self._chat_template

    def encode_prompt(self, prompt, chat: bool = False) -> list[int]:
        if isinstance(prompt, str):
            if not prompt.strip() and not chat:
                raise InputError("the prompt is empty: type some text to continue")
            if chat:
                if not prompt.strip():
                    raise InputError("the message is empty: type a question or instruction")
                text = self.chat_template.render([{"role": "user", "content": prompt}], add_generation_prompt=True)
                return self.tokenizer.encode(text, add_special=False, parse_special=True)
            return self.tokenizer.encode(prompt)
        ids = [int(i) for i in prompt]
        if not ids:
            raise InputError("the prompt has no tokens")
        bad = [i for i in ids if not 0 <= i < self.model.vocab]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary (0..{self.model.vocab - 1})")
        return ids

    async def generate(self, prompt, *, max_tokens: int = 256, on_token=None, chat: bool = False,
                       stop_at_eos: bool = True) -> GenerationResult:
        """Greedy generation from ``prompt`` (text or token ids). ``on_token(id, text_piece)`` streams the output."""
        from .tokenizer import StreamDecoder
        self._cancel = False
        ids = self.encode_prompt(prompt, chat)
        ctx = self.context_size
        if len(ids) >= ctx:
            raise ContextOverflowError(
                f"the prompt has {len(ids)} tokens but the context holds {ctx}; shorten the prompt or load the "
                f"model with a larger context size")
        result = GenerationResult(prompt_tokens=ids)
        if max_tokens <= 0:
            result.stop_reason = "max_tokens"
            return result
        model, eot = self.model, self.tokenizer.eot_ids if stop_at_eos else set()
        decoder = StreamDecoder(self.tokenizer)
        pieces = []

        def emit(tok):
            result.tokens.append(tok)
            piece = decoder.push(tok)
            pieces.append(piece)
            if on_token:
                on_token(tok, piece)

        # prefill, chunk by chunk; the last chunk also samples the first new token
        t0 = time.perf_counter()
        for start in range(0, len(ids), model.chunk):
            part = ids[start:start + model.chunk]
            model.prefill(part, start, with_head=start + model.chunk >= len(ids))
            if self._cancel:
                break
        first = None if self._cancel else (await model.read_log(1))[0]
        result.prefill_ms = (time.perf_counter() - t0) * 1000
        if first is None or self._cancel:
            result.stop_reason = "cancelled"
            return self._finish(result, pieces, decoder)
        pos = len(ids)          # position of the token just sampled
        t1 = time.perf_counter()
        stop = self._accept(first, result, eot, max_tokens, pos, emit)
        while not stop:
            # submit up to steps_per_read steps, then read their tokens back at once
            n = max(1, min(self.steps_per_read, max_tokens - len(result.tokens), ctx - pos, LOG_SIZE))
            h = time.perf_counter()
            for i in range(n):
                model.decode(pos + i, i)
            result.host_ms += (time.perf_counter() - h) * 1000
            new = await model.read_log(n)
            for tok in new:
                pos += 1
                stop = self._accept(tok, result, eot, max_tokens, pos, emit)
                if stop:
                    break   # tokens after a stop are discarded; their cache rows are overwritten later
            if not stop and self._cancel:
                stop = "cancelled"
        result.decode_ms = (time.perf_counter() - t1) * 1000
        result.stop_reason = stop
        return self._finish(result, pieces, decoder)

    def _accept(self, tok, result, eot, max_tokens, pos, emit):
        """Take one sampled token: emit it unless it ends the turn; return why to stop ("" to go on)."""
        if tok in eot:
            return "eos"
        emit(tok)
        if len(result.tokens) >= max_tokens:
            return "max_tokens"
        if pos >= self.context_size:
            return "context"
        return ""

    @staticmethod
    def _finish(result, pieces, decoder):
        pieces.append(decoder.flush())
        result.text = "".join(pieces)
        return result
