"""Speculative decoding: draft several tokens cheaply, check them with one pass of the model, keep the ones it agrees
with. The output is the model's own: the same tokens as plain decoding where the verify pass computes what a decode
step computes (the CPU model, CPU adapters), and up to the rounding between its prefill-shaped pass and the decode
kernels on GPUs with 8-bit decode products (about 1% of a logit on the H200: near-ties may go the other way).

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
retrieval answers). A round without drafts is a plain batch of decode steps. k adapts per round: + 2 after a round
that kept every draft (as transformers' assisted generation), else one more than the drafts kept, within
1 .. verify_rows - 1. A round that kept none makes the drafter rest for 1, 2, 4, then 8 plain rounds (doubling while
it keeps failing), so text that drafts do not match (prose for prompt lookup) costs little more than plain decoding.

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

PLAIN_STEPS = 8      # decode steps of a round without drafts (one readback)
MAX_REST = 8         # plain rounds a drafter rests at most after rounds that kept no draft


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


class PromptLookup:
    """Drafts from the sequence itself: what followed the latest earlier occurrence of its last n tokens."""

    NGRAMS = (3, 2, 1)

    def __init__(self):
        self.k = 8

    async def draft(self, seq: list[int], k: int) -> list[int]:
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
                i = int(found[-1]) + n
                return seq[i:i + k]
        return []


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
    """The engine's decode schedule under speculative decoding (engine._schedule): one round a read."""

    def __init__(self, engine, pos: int, seq: list[int], params, result, drafter):
        self.engine, self.model, self.result, self.drafter = engine, engine.model, result, drafter
        self.pos, self.seq = pos, seq       # seq[-1] is the input at position pos
        self.budget = min(params.max_tokens - len(result.tokens), engine.context_size - pos)
        self.round = None                   # (position, inputs) of the last round, for keep()
        self.rest, self.misses = 0, 0       # plain rounds to run before drafting again; rounds in a row that kept none
        self.sampler = engine._sampler if self.model.sampler_plan is not None else None

    async def next(self):
        from .engine import _Read
        model, d, pos = self.model, self.drafter, self.pos
        k = max(0, min(d.k, model.verify_rows - 1, self.budget - 1))
        if self.rest:
            self.rest, k = self.rest - 1, 0
        drafts = (await d.draft(self.seq, k))[:k] if k else []
        if not model.rewindable:            # the state before this round, to go back to
            model.mark()
            self.engine._mark = self.seq[:-1]
        if drafts:
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
        else:
            n = min(PLAIN_STEPS, self.budget)
            model.prefill([self.seq[-1]], pos, with_head=True)
            for i in range(1, n):
                model.decode(pos + i, i)
            tokens = await model.read_log(n)
        self.round = (pos, [self.seq[-1]] + tokens[:-1])
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
        """The stream stopped after ``used`` tokens of the last round: its state is as after their inputs."""
        if not self.model.rewindable:
            pos, inputs = self.round
            self._rerun(pos, inputs[:used])
        return True

    async def close(self):
        pass
