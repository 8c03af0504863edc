"""Sampling settings, the GPU sampler's host side, and host-side helpers (stop strings, the reference sampler).

    params = SamplingParams(temperature=0.7, top_k=40, seed=1)       # or SamplingParams.from_dict(page_settings)
    result = await engine.generate("Once upon a time", params, max_tokens=32)

Sampling runs on the GPU (shaders/sample.wgsl): the logits row is never read back. The host only writes the
settings (32 bytes, once per generation) and the prompt's latest tokens (the repetition-penalty window); the kernel
itself appends each token it draws. :func:`sample_numpy` is the same computation in numpy, written as plainly as
possible: the specification the kernel is tested against.

Order of operations (the same as transformers' processors; llama.cpp applies temperature last instead):
repetition penalty -> temperature -> top-k -> top-p -> min-p -> draw. Greedy is ``temperature == 0`` (or
``top_k == 1``): the argmax of the (penalised) logits, lowest index among equal maxima.
"""
from __future__ import annotations

import dataclasses
import math
import os
import struct
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError

RING = 1024             # the longest repetition-penalty window (the GPU ring of recent tokens)
TOP_LOGPROBS = 20       # the most top_logprobs a step returns (logprobs.wgsl computes this many)
_MASK32 = 0xFFFFFFFF


# -- settings ---------------------------------------------------------------------------------------------------------

@dataclass
class SamplingParams:
    """Generation settings. Every field has a documented default; ``SamplingParams()`` is the recommended setting
    for chat. ``GREEDY`` (temperature 0, no penalty) is what ``Engine.generate`` uses when given no settings."""

    max_tokens: int = 256          # stop after this many generated tokens
    temperature: float = 0.7       # 0 = greedy (argmax); higher = more varied
    top_k: int = 40                # keep the k most likely tokens; 0 = off; 1 = greedy
    top_p: float = 0.95            # keep the smallest set of most likely tokens holding this much probability; 1 = off
    min_p: float = 0.05            # drop tokens less likely than min_p x the most likely one; 0 = off
    repeat_penalty: float = 1.1    # divide positive logits (multiply negative ones) of recent tokens; 1 = off
    repeat_window: int = 64        # how many of the latest tokens (prompt included) the penalty covers; 0 = off
    seed: int | None = None        # same seed + prompt + settings = same tokens; None = a fresh random seed each time
    stop: list[str] = field(default_factory=list)            # texts that end the reply (never part of the output)
    stop_token_ids: list[int] = field(default_factory=list)  # token ids that end the reply (not part of the output)
    ignore_eos: bool = False       # keep going past the model's end-of-turn tokens
    frequency_penalty: float = 0.0  # subtract this x (times a token occurs in the penalty window); -2..2, 0 = off
    presence_penalty: float = 0.0   # subtract this from tokens present in the penalty window; -2..2, 0 = off
    logit_bias: dict = field(default_factory=dict)   # token id -> added to its logit (-100..100; -100 bans it)
    logprobs: bool = False         # return each generated token's log-probability (GenerationResult.logprobs)
    top_logprobs: int = 0          # and the most likely alternatives at each step (0..20)
    speculative: str = "auto"      # drafts checked several at a time (cera_web.speculative): "auto" (the engine's
                                   # draft model if one is loaded, else prompt lookup where it pays, on a GPU or the
                                   # CPU model), "draft", "lookup" (drafts from earlier text), "off"; the same tokens
                                   # either way

    def __post_init__(self):
        self.validate()

    # settings-panel metadata: name -> (label, min, max, help); the page can build its form from describe()
    _INFO = {
        "max_tokens": ("Max tokens", 0, None, "stop after this many generated tokens"),
        "temperature": ("Temperature", 0.0, 5.0, "0 = always the most likely token; higher = more varied"),
        "top_k": ("Top-k", 0, None, "keep the k most likely tokens (0 = off)"),
        "top_p": ("Top-p", 0.0, 1.0, "keep the most likely tokens holding this much probability (1 = off)"),
        "min_p": ("Min-p", 0.0, 1.0, "drop tokens less likely than this fraction of the top token (0 = off)"),
        "repeat_penalty": ("Repetition penalty", 0.01, 10.0, "penalise recently used tokens (1 = off)"),
        "repeat_window": ("Penalty window", 0, RING, "how many recent tokens the penalty looks at"),
        "seed": ("Seed", 0, 2 ** 64 - 1, "same seed, same output; empty = random"),
        "stop": ("Stop strings", None, None, "texts that end the reply"),
        "stop_token_ids": ("Stop token ids", None, None, "token ids that end the reply"),
        "ignore_eos": ("Ignore end of turn", None, None, "keep generating past the model's end-of-turn token"),
        "speculative": ("Speculative decoding", None, None, "the same reply in fewer passes: lookup (drafts from "
                        "the conversation: edits, quotes), auto (a draft model if loaded, else lookup where it "
                        "pays), off"),
    }

    # settings of the OpenAI-shaped API (cera_web.openai_api), not offered in the page's settings form (describe())
    API_ONLY = ("frequency_penalty", "presence_penalty", "logit_bias", "logprobs", "top_logprobs")
    SPECULATIVE = ("auto", "draft", "lookup", "off")

    def validate(self) -> "SamplingParams":
        """Check (and normalise) every field; raise InputError saying which one is wrong and what is allowed."""
        def num(name, lo, hi, integer=False):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not float(v).is_integer()):
                raise InputError(f"{name} must be {'an integer' if integer else 'a number'}, got {v!r}")
            if not math.isfinite(v) or v < lo or (hi is not None and v > hi):
                rng = f">= {lo}" if hi is None else f"between {lo} and {hi}"
                raise InputError(f"{name} must be {rng}, got {v!r}")
            setattr(self, name, int(v) if integer else float(v))

        num("max_tokens", 0, None, integer=True)
        num("temperature", 0.0, self._INFO["temperature"][2])
        num("top_k", 0, None, integer=True)
        num("top_p", 0.0, 1.0)
        num("min_p", 0.0, 1.0)
        num("repeat_window", 0, RING, integer=True)
        v, top = self.repeat_penalty, self._INFO["repeat_penalty"][2]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= top:
            raise InputError(f"repeat_penalty must be a positive number up to {top} (1 = off), got {v!r}")
        self.repeat_penalty = float(v)
        if self.seed is not None:
            num("seed", 0, 2 ** 64 - 1, integer=True)
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if not isinstance(self.stop, (list, tuple)) or not all(isinstance(s, str) for s in self.stop):
            raise InputError(f"stop must be a list of strings, got {self.stop!r}")
        self.stop = [s for s in self.stop if s]
        if isinstance(self.stop_token_ids, int):
            self.stop_token_ids = [self.stop_token_ids]
        if not isinstance(self.stop_token_ids, (list, tuple)) or \
                not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.stop_token_ids):
            raise InputError(f"stop_token_ids must be a list of token ids (integers >= 0), got {self.stop_token_ids!r}")
        self.stop_token_ids = [int(t) for t in self.stop_token_ids]
        self.ignore_eos = bool(self.ignore_eos)
        num("frequency_penalty", -2.0, 2.0)
        num("presence_penalty", -2.0, 2.0)
        num("top_logprobs", 0, TOP_LOGPROBS, integer=True)
        self.logprobs = bool(self.logprobs) or self.top_logprobs > 0
        if not isinstance(self.logit_bias, dict):
            raise InputError(f"logit_bias must be a dict of token id -> bias, got {self.logit_bias!r}")
        bias = {}
        for k, v in self.logit_bias.items():
            try:
                t = int(k)
            except (TypeError, ValueError):
                raise InputError(f"logit_bias keys must be token ids, got {k!r}") from None
            if t < 0 or isinstance(v, bool) or not isinstance(v, (int, float)) or not -100 <= v <= 100:
                raise InputError(f"logit_bias must map token ids >= 0 to numbers between -100 and 100, got "
                                 f"{k!r}: {v!r}")
            bias[t] = float(v)
        self.logit_bias = bias
        if self.speculative not in self.SPECULATIVE:
            raise InputError(f"speculative must be one of {', '.join(map(repr, self.SPECULATIVE))}, got "
                             f"{self.speculative!r}")
        return self

    @property
    def greedy(self) -> bool:
        """Whether the output is the argmax at every step (no randomness)."""
        return self.temperature == 0 or self.top_k == 1

    @property
    def penalised(self) -> bool:
        return (self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0) \
            and self.repeat_window > 0

    def replace(self, **changes) -> "SamplingParams":
        """A copy with some fields changed (validated; unknown names raise InputError)."""
        unknown = set(changes) - set(self.field_names())
        if unknown:
            raise InputError(f"unknown generation setting(s) {', '.join(sorted(unknown))}; the settings are "
                             f"{', '.join(self.field_names())}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, settings: dict | None, base: "SamplingParams | None" = None) -> "SamplingParams":
        """Settings from a plain dict (e.g. the page's form); missing keys keep ``base``'s values (default: the
        defaults). ``seed`` may be None or "" for a random seed."""
        settings = dict(settings or {})
        if settings.get("seed") == "":
            settings["seed"] = None
        return (base or cls()).replace(**settings)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def describe(cls) -> list[dict]:
        """One dict per setting for a settings form: name, label, default, min, max (None = unbounded), help."""
        d = cls()
        return [{"name": n, "label": lab, "default": getattr(d, n), "min": lo, "max": hi, "help": h}
                for n, (lab, lo, hi, h) in cls._INFO.items()]


GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0)


# -- the random number of a step ------------------------------------------------------------------------------------

def _pcg(v: int) -> int:
    s = (v * 747796405 + 2891336453) & _MASK32
    w = (((s >> ((s >> 28) + 4)) ^ s) * 277803737) & _MASK32
    return (w >> 22) ^ w


def uniform(seed: int, position: int) -> float:
    """The random number in [0, 1) that sample.wgsl draws the token at ``position`` with (24 bits)."""
    lo, hi = seed & _MASK32, (seed >> 32) & _MASK32
    h = _pcg(lo ^ _pcg(hi ^ _pcg(position & _MASK32)))
    return (h >> 8) / 16777216.0


def random_seed() -> int:
    """A fresh 64-bit seed (os.urandom works in Pyodide too)."""
    return int.from_bytes(os.urandom(8), "little")


# -- the reference sampler --------------------------------------------------------------------------------------------

def penalise(logits: np.ndarray, recent, penalty: float, frequency: float = 0.0, presence: float = 0.0) -> np.ndarray:
    """llama.cpp's repeat penalty: each distinct token of ``recent`` once: logit / penalty if > 0, else * penalty;
    then OpenAI's: minus frequency x (its count in ``recent``) + presence."""
    z = np.array(logits, np.float32)
    counts: dict[int, int] = {}
    for t in recent:
        counts[int(t)] = counts.get(int(t), 0) + 1
    for t, c in counts.items():
        if 0 <= t < len(z):
            z[t] = z[t] / np.float32(penalty) if z[t] > 0 else z[t] * np.float32(penalty)
            z[t] -= np.float32(c * frequency + presence)
    return z


def z_numpy(logits: np.ndarray, params: SamplingParams, recent=(), allowed=None) -> np.ndarray:
    """The values sample.wgsl draws from (before temperature): logits + logit_bias, penalised over the window,
    forbidden tokens (``allowed`` False) at -3.4e38."""
    z = np.array(logits, np.float32)
    for t, b in params.logit_bias.items():
        if t < len(z):
            z[t] += np.float32(b)
    if params.penalised:
        window = list(recent)[-params.repeat_window:]
        z = penalise(z, window, params.repeat_penalty, params.frequency_penalty, params.presence_penalty)
    if allowed is not None:
        z = np.where(allowed, z, np.float32(-3.4e38))
    return z


def logprobs_numpy(logits: np.ndarray, params: SamplingParams, recent=(), allowed=None) -> np.ndarray:
    """log-softmax of z_numpy (float64): what logprobs.wgsl reports."""
    z = z_numpy(logits, params, recent, allowed).astype(np.float64)
    m = z.max()
    return z - (m + np.log(np.exp(z - m).sum()))


def kept_tokens(logits: np.ndarray, params: SamplingParams, recent=(), allowed=None) -> tuple[np.ndarray, np.ndarray]:
    """The tokens that may be drawn (ascending ids) and their probabilities (normalised over them), computed by
    sorting: the plain statement of what sample.wgsl keeps. ``recent``: the latest tokens, oldest first.
    ``allowed``: a boolean array over the vocabulary (a grammar's mask), or None for every token."""
    z = z_numpy(logits, params, recent, allowed)
    if params.greedy:
        i = int(np.argmax(z))     # the first index among equal maxima
        return np.array([i]), np.array([1.0])
    p = np.exp((z.astype(np.float64) - z.max()) / params.temperature)
    order = np.argsort(-p, kind="stable")
    ps = p[order]
    thr = 0.0
    if 1 < params.top_k < len(p):
        thr = ps[params.top_k - 1]
    if params.top_p < 1.0:
        top = ps[ps >= thr]
        cum = np.cumsum(top)
        n = int(np.searchsorted(cum, params.top_p * cum[-1]))   # the first prefix reaching the target
        thr = max(thr, top[min(n, len(top) - 1)])
    thr = max(thr, params.min_p)
    keep = np.nonzero((p >= thr) & (p > 0))[0]
    return keep, p[keep] / p[keep].sum()


def sample_numpy(logits: np.ndarray, params: SamplingParams, recent=(), u: float = 0.0, allowed=None) -> int:
    """The token sample.wgsl draws for random number ``u`` (see :func:`uniform`): inverse CDF over the kept tokens
    in index order. Agrees with the kernel except when u falls within float rounding of a CDF step."""
    keep, probs = kept_tokens(logits, params, recent, allowed)
    i = int(np.searchsorted(np.cumsum(probs), u, side="right"))
    return int(keep[min(i, len(keep) - 1)])


# -- the GPU sampler -------------------------------------------------------------------------------------------------

class GPUSampler:
    """The sample.wgsl dispatch for one model, as a recorded plan that the model submits right after its head
    (whose argmax it overrides): its settings uniform, its ring of recent tokens and its scratch row."""

    def __init__(self, dev, vocab: int, logits, tokens, log, step, probe: bool = False, slots: int = 256):
        from . import kernels
        self.dev = dev
        self.vocab = vocab
        self.words = -(-vocab // 32)
        self.params = dev.create_buffer(64, kind="uniform", label="sampling params")
        # the grammar mask (words), then the dense logit_bias (f32 per token)
        self.cons = dev.create_buffer(4 * (self.words + vocab), label="mask and logit bias")
        self.ring = dev.create_buffer(4 * RING, label="recent tokens")
        self.work = dev.create_buffer(16 * (-(-vocab // 4)), label="sampling scratch")
        self.z = dev.create_buffer(16 * (-(-vocab // 4)), label="sampled-from logits")
        self.stride = 2 + 2 * TOP_LOGPROBS
        self.slots = slots
        self.lp = dev.create_buffer(4 * self.stride * slots, label="logprobs")
        self._bias_set = False
        self._last_mask = None
        self.logprobs = False
        pipe = dev.pipeline(kernels.build("sample", V=vocab, RING=RING, PROBE=probe), "sample")
        # logits twice: as f32 (the tail) and as vec4 (whole groups of 4, read two at a time)
        group = dev.bind(pipe, [logits, tokens, log, step, self.params, self.ring, self.work, logits, self.cons,
                                self.z])
        lpipe = dev.pipeline(kernels.build("logprobs", V=vocab, TOPN=TOP_LOGPROBS), "logprobs")
        lgroup = dev.bind(lpipe, [self.z, tokens, step, self.lp])
        self.plain_plan = dev.record([(pipe, group, (1, 1, 1))])
        self.logprobs_plan = dev.record([(pipe, group, (1, 1, 1)), (lpipe, lgroup, (1, 1, 1))])
        self.plan = self.plain_plan

    @classmethod
    def for_model(cls, model) -> "GPUSampler":
        return cls(model.dev, model.vocab, model.logits, model.tokens, model.log, model.step,
                   slots=model.max_steps_per_read)

    def set_params(self, params: SamplingParams, seed: int, masked: bool = False):
        """The generation's settings; masked: apply the mask (set_mask before each step). Selects ``plan``: the
        sampler alone, or followed by logprobs.wgsl when params.logprobs."""
        temperature = 0.0 if params.greedy else params.temperature
        penalised = params.penalised
        biased = bool(params.logit_bias)
        if biased:
            bias = np.zeros(self.vocab, np.float32)
            for t, b in params.logit_bias.items():
                if t >= self.vocab:
                    raise InputError(f"logit_bias token id {t} is outside the vocabulary (0..{self.vocab - 1})")
                bias[t] = b
            self.dev.write_buffer(self.cons, bias, 4 * self.words)
        self.logprobs = params.logprobs
        self._last_mask = None
        self.plan = self.logprobs_plan if params.logprobs else self.plain_plan
        self.dev.write_buffer(self.params, struct.pack(
            "<fIfffIIIIIffI12x", temperature, min(params.top_k, _MASK32), params.top_p, params.min_p,
            params.repeat_penalty if penalised else 1.0, params.repeat_window, seed & _MASK32, (seed >> 32) & _MASK32,
            int(masked), int(biased), params.frequency_penalty if penalised else 0.0,
            params.presence_penalty if penalised else 0.0, int(params.logprobs)))

    def set_mask(self, words: np.ndarray):
        """The allowed tokens of the next step: a uint32 bitset over the vocabulary (cera_web.grammar.Matcher.mask).
        The grammar's masks are cached arrays, so the same array as the last one written (a state that repeats, as
        inside a string) is already on the GPU."""
        if words is not self._last_mask:
            self.dev.write_buffer(self.cons, words)
            self._last_mask = words

    async def read_logprobs(self, n: int, top: int) -> list[dict]:
        """The logprobs of the last n steps (slots 0..n-1): {"logprob", "top_logprobs": [(id, logprob), ...]}."""
        return self.parse_logprobs(await self.dev.read(self.lp, 0, 4 * self.stride * n), top)

    def logprobs_slice(self, slot: int) -> tuple:
        """(buffer, offset, bytes) of one step's logprobs slot, to read back with the step's token."""
        return (self.lp, 4 * self.stride * slot, 4 * self.stride)

    def parse_logprobs(self, raw: bytes, top: int) -> list[dict]:
        out = []
        for row in np.frombuffer(raw, np.float32).reshape(-1, self.stride):
            k = min(int(row[1]), top)
            ids = row[2:2 + 2 * k:2].view(np.uint32)
            out.append({"logprob": float(row[0]),
                        "top_logprobs": [(int(i), float(v)) for i, v in zip(ids, row[3:3 + 2 * k:2])]})
        return out

    def set_history(self, ids):
        """Put the latest RING tokens of the sequence ``ids`` (positions 0..len-1) into the ring."""
        n = len(ids)
        ring = np.zeros(RING, np.uint32)
        for p in range(max(0, n - RING), n):
            ring[p % RING] = ids[p]
        self.dev.write_buffer(self.ring, ring)


# -- stop strings -----------------------------------------------------------------------------------------------------

class StopMatcher:
    """Streams text while holding back what could still become a stop string.

    push(piece) returns (text safe to show now, whether a stop string was completed); once one is, the returned
    text ends right before it and nothing after it is ever returned. flush() releases what is held back when the
    stream ends without a stop."""

    def __init__(self, stops):
        self.stops = [s for s in stops if s]
        self.pending = ""
        self.matched: str | None = None

    def push(self, piece: str) -> tuple[str, bool]:
        if self.matched is not None:
            return "", True
        self.pending += piece
        if not self.stops:
            out, self.pending = self.pending, ""
            return out, False
        hits = [(i, s) for s in self.stops if (i := self.pending.find(s)) >= 0]
        if hits:
            i, self.matched = min(hits)
            out, self.pending = self.pending[:i], ""
            return out, True
        hold = 0     # the longest tail of pending that is a proper prefix of some stop string
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.pending)), hold, -1):
                if self.pending.endswith(s[:k]):
                    hold = k
                    break
        cut = len(self.pending) - hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out, False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out
