"""Speculative decoding: draft several tokens cheaply, check them with one pass of the model, keep the ones it agrees
with. The output is the model's own: the same tokens as plain decoding, since the verify pass computes each row
as a decode step computes it (Transformer.verify: the decode kernels, bit for bit where decode products run on 8-bit
activations; elsewhere the prefill products, a rounding apart).

Each round, with ``prev`` the last token drawn (the input at position pos) and d1..dk the drafts:

    model.verify([prev, d1, .., dk], pos)  ->  g0 .. gk      gi: the model's argmax after its i-th input
    a = the number of leading drafts with d(i+1) == gi;  the round yields g0 .. ga (a + 1 tokens)

so every round yields at least one token (g0 is a plain decode step's answer) and at most k + 1. Positions past
pos + a hold rejected drafts' K/V: attention never reads them (later passes overwrite them). A model with a running
state (LFM2's conv layers on the GPU) marks its state before the round and, when a draft was rejected, goes back to
the mark and runs the accepted inputs again.

Drafts come from a draft model (``engine.load_draft``: a small model with the same tokenizer, greedy, on the same
device; its own KV cache follows the sequence, resuming at the longest prefix it holds) or from prompt lookup (the
tokens that followed the latest earlier occurrence of the sequence's last n tokens, n = 3, 2, 1: quoting, code edits,
retrieval answers). Where there is nothing to draft, decoding goes on as plain decoding does (a plain stretch: the
engine's batches of decode steps, sized by its pacer, the next in flight while one is read) until the drafter has
drafts again. k adapts per round: + 2 after a round that kept every draft (as transformers' assisted generation),
else one more than the drafts kept, within 1 .. verify_rows - 1. A round that kept none makes the drafter rest for
1, 2, 4, then 8 plain reads (doubling while it keeps failing), so text that drafts do not match (prose for prompt
lookup) costs little more than plain decoding.

Sampling is speculated too: the model draws each row as a plain decode step at that position would (the same random
number, from the seed and the position; the same penalties), and a draft is kept when it equals the draw. Drafts are
deterministic (the draft model drafts greedily), so this is the standard rejection rule (keep d with probability
min(1, p(d)/q(d)), else draw from the normalised max(0, p - q)) for a draft distribution q that is all on d: kept
with probability p(d), else a draw from p without d. The output is therefore not only distributed as the model's:
with the same seed it is the same tokens as without speculation. (A sampled draft with its own q would accept more
often at high temperatures, at the cost of that reproducibility and of reading q back; not done.) Not speculated:
grammars (a draft would need each state's mask) and logprobs. SamplingParams.speculative says when
(cera_web.sampling: "auto" uses a loaded draft model, "draft", "lookup", "off").
"""
from __future__ import annotations

import numpy as np

from .errors import InputError

MAX_REST = 8         # plain reads a drafter rests at most after rounds that kept no draft


class DraftModel:
    """Drafts with a draft Engine (engine.draft): its greedy continuation of the sequence."""

    def __init__(self, engine):
        self.engine = engine
        self.k = 4

    async def draft(self, seq: list[int], k: int) -> list[int]:
        e, model = self.engine, self.engine.model
        e._cancel = False
        start = e._resume(seq)
        e._cache_passes = -1                # until the drafts are read: a failure leaves nothing held
        if not await e._prefill(seq, start):
            return []
        for i in range(k - 1):              # the prefill's head drew the first draft into slot 0
            model.decode(len(seq) + i, i + 1)
        out = await model.read_log(k)
        e._cache = seq + out[:-1]
        e._cache_passes = model.passes
        return out

    def ready(self, seq: list[int]) -> bool:
        return True                         # it drafts whenever it is not resting


class PromptLookup:
    """Drafts from the sequence itself: what followed the latest earlier occurrence of its last n tokens."""

    NGRAMS = (3, 2, 1)

    def __init__(self):
        self.k = 8

    async def draft(self, seq: list[int], k: int) -> list[int]:
        i = self.match(seq)
        return seq[i:i + k] if i is not None else []

    def ready(self, seq: list[int]) -> bool:
        """Whether draft() has drafts for seq (a plain stretch ends when it does)."""
        return self.match(seq) is not None

    def match(self, seq: list[int]) -> int | None:
        """Where the drafts start: after the latest earlier occurrence of the last 3, 2 or 1 tokens; or None."""
        arr = np.asarray(seq, np.int64)
        for n in self.NGRAMS:
            m = len(arr) - n            # candidate starts i < m: a match with at least one token after it
            if m <= 0:
                continue
            hit = np.ones(m, bool)
            for j in range(n):
                hit &= arr[j:j + m] == arr[m + j]
            found = np.flatnonzero(hit)
            if found.size:
                return int(found[-1]) + n
        return None


def drafter(engine, params):
    """The drafter of a greedy generation under params.speculative, or None (decode one token a step)."""
    mode = params.speculative
    if mode == "lookup":
        return PromptLookup()
    if mode == "draft" and engine.draft is None:
        raise InputError("speculative='draft' needs a draft model: load one with engine.load_draft(path) (CLI: "
                         "--draft FILE), or use speculative='lookup'")
    if mode in ("draft", "auto") and engine.draft is not None:
        return DraftModel(engine.draft)
    return None


class Speculative:
    """The engine's decode schedule under speculative decoding (engine._schedule): a verify round a read while there
    are drafts; between them a plain stretch, the engine's own batches of decode steps (engine._Batches: sized by its
    pacer, the next batch in flight while one is read), which ends once the drafter has drafts again."""

    def __init__(self, engine, pos: int, seq: list[int], params, result, drafter):
        self.engine, self.model, self.params, self.result, self.drafter = engine, engine.model, params, result, drafter
        self.pos, self.seq = pos, seq       # seq[-1] is the input at position pos
        self.budget = min(params.max_tokens - len(result.tokens), engine.context_size - pos)
        self.round = None                   # (position, inputs) of the last verify round, for keep()
        self.rest, self.misses = 0, 0       # plain reads before drafting again; rounds in a row that kept none
        self.sampler = engine._sampler if self.model.sampler_plan is not None else None
        self.plain = None                   # the plain stretch running (engine._Batches), or None
        self.stretch = None                 # the plain stretch of the read last returned (None: a verify round's)

    def _k(self) -> int:
        return max(0, min(self.drafter.k, self.model.verify_rows - 1, self.budget - 1))

    async def next(self):
        from .engine import _Batches
        if self.plain is None:
            k = 0 if self.rest else self._k()
            drafts = (await self.drafter.draft(self.seq, k))[:k] if k else []
            if drafts:
                self.stretch = None
                return await self._verify(drafts)
            ahead = self.engine.overlap and self.model.runs_ahead
            self.plain = _Batches(self.engine, self.pos, self.params, self.result, depth=2 if ahead else 1,
                                  first=self.seq[-1])
        self.stretch = self.plain
        read = await self.plain.next()
        self.seq += read.tokens
        self.pos += len(read.tokens)
        self.budget -= len(read.tokens)
        self.rest = max(0, self.rest - 1)
        if self.plain.budget > 0 and not self.rest and self._k() and self.drafter.ready(self.seq):
            self.plain.budget = 0           # no more plain batches: the ones in flight are read, then drafts
        if self.plain.budget <= 0 and not self.plain.flight:
            self.plain = None
        return read

    async def _verify(self, drafts: list[int]):
        """A verify round: the last token and the drafts in one pass; the tokens it yields."""
        from .engine import _Read
        model, d, pos = self.model, self.drafter, self.pos
        if not model.rewindable:            # the state before this round, to go back to
            model.mark()
            self.engine._mark = self.seq[:-1]
        inputs = [self.seq[-1]] + drafts
        model.verify(inputs, pos)
        out = await model.read_log(len(inputs))
        a = 0
        while a < len(drafts) and drafts[a] == out[a]:
            a += 1
        tokens = out[:a + 1]
        self.result.drafted += len(drafts)
        self.result.accepted += a
        d.k = min(d.k + 2, model.verify_rows - 1) if a == len(drafts) else max(1, min(d.k - 1, a + 1))
        self.misses = 0 if a else self.misses + 1
        self.rest = min(2 ** (self.misses - 1), MAX_REST) if self.misses else 0
        if self.sampler is not None:      # the penalties' window: the sequence, not the rows' rejected draws
            self.sampler.set_history(self.seq + tokens)
        if a < len(drafts) and not model.rewindable:
            self._rerun(pos, inputs[:a + 1])
        self.round = (pos, inputs[:a + 1])
        self.seq += tokens
        self.pos += len(tokens)
        self.budget -= len(tokens)
        return _Read(tokens, None, 0, False)

    def _rerun(self, pos: int, inputs: list[int]):
        """Take the running state back to the mark (before position pos), then through ``inputs`` again."""
        self.model.restore_mark()
        if inputs:
            self.model.prefill(inputs, pos, with_head=False)

    def keep(self, read, used: int) -> bool:
        """The stream stopped after ``used`` tokens of the last read: its state is as after their inputs (a plain
        stretch's: its slots' snapshots, engine._Batches.keep; a verify round's: from the mark)."""
        if self.stretch is not None:
            return self.stretch.keep(read, used)
        if not self.model.rewindable:
            pos, inputs = self.round
            self._rerun(pos, inputs[:used])
        return True

    async def close(self):
        if self.plain is not None:
            await self.plain.close()
