"""Speculative decoding: draft several tokens cheaply, check them with one pass of the model, keep the ones it agrees
with. The output is the model's own: the verify pass runs the decode kernels over its tokens (Model.verify), so where
decode products run on 8-bit activations each token's logits are its decode step's bit for bit and the tokens are
plain decoding's; elsewhere (the prefill products) a rounding apart, where near-ties may go the other way.

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
retrieval answers). k adapts per round: + 2 after a round that kept every draft (as transformers' assisted
generation), else one more than the drafts kept, within 1 .. verify_rows - 1. Where there are no drafts, or the
drafter rests, the steps are plain decoding's (the engine's _Batches, the next batch in flight while one is read): a
round that kept no draft makes the drafter rest for 8, 16, 32, then 64 steps in batches of PLAIN_STEPS (doubling
while it keeps failing); past the rest the stretch goes on in the pacer's batches while the drafter says a round is
not worth it (drafter.worth: prompt lookup scores itself for free on the reply so far), so text that drafts do not
match (prose for prompt lookup) runs as fast as plain decoding.

Sampling is speculated too: the model draws each row as a plain decode step at that position would (the same random
number, from the seed and the position; the same penalties), and a draft is kept when it equals the draw. Drafts are
deterministic (the draft model drafts greedily), so this is the standard rejection rule (keep d with probability
min(1, p(d)/q(d)), else draw from the normalised max(0, p - q)) for a draft distribution q that is all on d: kept
with probability p(d), else a draw from p without d. The output is therefore not only distributed as the model's:
with the same seed it is the same tokens as without speculation. (A sampled draft with its own q would accept more
often at high temperatures, at the cost of that reproducibility and of reading q back; not done.) Not speculated:
grammars (a draft would need each state's mask) and logprobs. SamplingParams.speculative says when
(cera_web.sampling: "auto", the default, uses a loaded draft model, else prompt lookup where a verify pass costs a
few decode steps: a GPU that is not a CPU adapter, and the CPU model; "draft", "lookup", "off"). Prompt lookup runs a
round only where it pays: PromptLookup.worth scores it for free on the reply so far.
"""
from __future__ import annotations

import numpy as np

from .errors import InputError

PLAIN_STEPS = 8      # decode steps a read where nothing is drafted
MAX_REST = 8         # PLAIN_STEPS batches a drafter rests at most after rounds that kept no draft


def agreed(drafts: list[int], tokens: list[int]) -> int:
    """How many leading drafts equal the tokens that came (a round's kept drafts, or a scored position's)."""
    a = 0
    while a < len(drafts) and a < len(tokens) and drafts[a] == tokens[a]:
        a += 1
    return a


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

    def worth(self, seq: list[int], start: int) -> bool:
        return True             # what its drafts would keep is known only by running it


class PromptLookup:
    """Drafts from the sequence itself: what followed the latest earlier occurrence of its last n tokens. Where it
    pays is scored for free: at each position of the reply, the drafts lookup would have made there against the
    tokens that came (worth)."""

    NGRAMS = (3, 2, 1)
    SCORED = 8          # tokens after a position needed to score it (runs counted up to this many)
    RECENT = 32         # positions the score covers

    def __init__(self, asked: bool = True):
        """asked: speculative="lookup" (rounds where the drafts kept 1 on average, and one before any evidence: the
        most speed on edits and quotes); else "auto", the default (2 on average, no round before evidence: never
        slower than plain decoding on prose) -- BENCHMARKS.md, session 20."""
        self.k = 8
        self.min_kept = 1.0 if asked else 2.0       # drafts kept on average for a round to be worth its verify pass
        self.blind = asked                          # worth a round before any position is scored
        self.kept = []          # per scored position of the reply: how many of lookup's drafts would have been kept
        self.next = None        # the next position to score

    async def draft(self, seq: list[int], k: int) -> list[int]:
        return self.lookup(np.asarray(seq, np.int64), len(seq), k)

    def lookup(self, arr, end: int, k: int) -> list[int]:
        """The drafts from arr[:end]: up to k tokens after the latest earlier occurrence of its last 3, 2 or 1."""
        for n in self.NGRAMS:
            m = end - n                 # candidate starts i < m: a match with at least one token after it
            if m <= 0:
                continue
            hit = np.ones(m, bool)
            for j in range(n):
                hit &= arr[j:j + m] == arr[m + j]
            found = np.flatnonzero(hit)
            if found.size:
                i = int(found[-1]) + n
                return arr[i:min(i + k, end)].tolist()
        return []

    def worth(self, seq: list[int], start: int) -> bool:
        """Whether a round is worth running now: lookup's drafts at the last RECENT scored positions of the reply
        (it starts at seq[start]) would have kept min_kept tokens on average; until a position is scored, blind. A
        position e (drafting from seq[:e]) is scored once the SCORED tokens after it are known."""
        arr = np.asarray(seq, np.int64)
        e = max(self.next or 0, start + 1)
        while e + self.SCORED <= len(arr):
            self.kept.append(agreed(self.lookup(arr, e, self.SCORED), arr[e:e + self.SCORED].tolist()))
            e += 1
        self.next = e
        recent = self.kept[-self.RECENT:]
        return sum(recent) >= self.min_kept * len(recent) if recent else self.blind


def drafter(engine, params):
    """The drafter of a greedy generation under params.speculative, or None (decode one token a step)."""
    mode = params.speculative
    if mode == "lookup":
        return PromptLookup(asked=True)
    if mode == "draft" and engine.draft is None:
        raise InputError("speculative='draft' needs a draft model: load one with engine.load_draft(path) (CLI: "
                         "--draft FILE), or use speculative='lookup'")
    if mode in ("draft", "auto") and engine.draft is not None:
        return DraftModel(engine.draft)
    if mode == "auto" and (engine.cpu or not engine.dev.is_cpu):
        return PromptLookup(asked=False)    # where a verify pass costs a few decode steps: a GPU that is not a CPU
    return None                             # adapter, or the CPU model (its products batch the rows)


class Speculative:
    """The engine's decode schedule under speculative decoding (engine._schedule): a read is a round's tokens or a
    batch of a plain stretch's."""

    def __init__(self, engine, pos: int, seq: list[int], params, result, drafter):
        self.engine, self.model, self.params, self.result = engine, engine.model, params, result
        self.drafter = drafter
        self.pos, self.seq = pos, seq       # seq[-1] is the input at position pos
        self.start = len(seq) - 1           # the reply's first token in seq
        self.budget = min(params.max_tokens - len(result.tokens), engine.context_size - pos)
        self.round = None                   # (position, inputs) of the last round, for keep()
        self.plain = None                   # the plain stretch running (an engine _Batches), None after a round
        self.rest = 0                       # PLAIN_STEPS batches to run before drafting again
        self.misses = 0                     # rounds in a row that kept no draft
        self.sampler = engine._sampler if self.model.sampler_plan is not None else None

    async def next(self):
        if self.plain is None or self.plain.done:
            d = self.drafter
            k = max(0, min(d.k, self.model.verify_rows - 1, self.budget - 1))
            drafts = (await d.draft(self.seq, k))[:k] if k and not self.rest and d.worth(self.seq, self.start) else []
            if drafts:
                return self._round(drafts, await self._check(drafts))
            self.plain = self._stretch()
        read = await self.plain.next()
        self._took(read.tokens)
        return read

    def _stretch(self):
        """Plain decode steps from the last token taken: the drafter's rest in batches of PLAIN_STEPS (one batch
        where it does not rest), then plain decoding's own batches (the pacer's size: fewer reads) while a round is
        not worth it (drafter.worth, on the tokens read when the next batch is submitted)."""
        from .engine import _Batches
        e, model, d = self.engine, self.model, self.drafter
        model.set_next(self.seq[-1])
        least, self.rest = max(self.rest, 1) * PLAIN_STEPS, 0

        def more(steps: int) -> bool:
            if steps < least:
                return True
            if d.worth(self.seq, self.start):
                return False
            stretch.size = None
            return True
        stretch = _Batches(e, self.pos, self.params, self.result, 2 if e.overlap and model.runs_ahead else 1,
                           size=PLAIN_STEPS, more=more)
        return stretch

    async def _check(self, drafts: list[int]) -> list[int]:
        """Run the verify pass of a round: the model's token after the last one taken and after each draft."""
        self.plain = None
        model = self.model
        if not model.rewindable:            # the state before this round, to go back to
            model.mark()
            self.engine._mark = self.seq[:-1]
        model.verify([self.seq[-1]] + drafts, self.pos)
        return await model.read_log(len(drafts) + 1)

    def _round(self, drafts: list[int], out: list[int]):
        """Keep the drafts the model agrees with, and its own token after them; adapt k and the rest."""
        from .engine import _Read
        model, d, pos = self.model, self.drafter, self.pos
        inputs = [self.seq[-1]] + drafts
        a = agreed(drafts, out)
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
        self._took(tokens)
        return _Read(tokens, None, 0, False)

    def _took(self, tokens: list[int]):
        self.seq += tokens
        self.pos += len(tokens)
        self.budget -= len(tokens)

    def _rerun(self, pos: int, inputs: list[int]):
        """Take the running state back to the mark (before position pos), then through ``inputs`` again."""
        self.model.restore_mark()
        if inputs:
            self.model.prefill(inputs, pos, with_head=False)

    def keep(self, read, used: int) -> bool:
        """The stream stopped after ``used`` tokens of the last read: its state is as after their inputs."""
        if self.plain is not None:
            return self.plain.keep(read, used)
        if not self.model.rewindable:
            pos, inputs = self.round
            self._rerun(pos, inputs[:used])
        return True

    async def close(self):
        if self.plain is not None:
            await self.plain.close()
