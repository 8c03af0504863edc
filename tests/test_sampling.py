"""Sampling: settings, stop strings, the GPU sampler (shaders/sample.wgsl) on constructed logits against hand-made
allowed sets and the numpy specification, and generation with the real default model (SmolLM2-135M) against the
transformers greedy fixture (tests/fixtures/smollm2_reference.json)."""
import asyncio
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from cera_web.errors import InputError
from cera_web.sampling import (GREEDY, RING, GPUSampler, SamplingParams, StopMatcher, kept_tokens, sample_numpy,
                               uniform)

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "smollm2_reference.json").read_text())
PROMPTS = {p["name"]: p for p in FIXTURE["prompts"]}


def run(coro):
    return asyncio.run(coro)


# -- settings and host-side helpers (no GPU) ---------------------------------------------------------------------------

def test_params_defaults_and_validation():
    p = SamplingParams()
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.repeat_window) == \
        (0.7, 40, 0.95, 0.05, 1.1, 64)
    assert not p.greedy and p.penalised and p.seed is None
    assert GREEDY.greedy and not GREEDY.penalised
    assert SamplingParams(top_k=1).greedy and SamplingParams(temperature=0).greedy
    assert SamplingParams(stop="END").stop == ["END"]
    for bad, match in [(dict(temperature=-1), "temperature"), (dict(top_p=1.5), "top_p"), (dict(min_p=-0.1), "min_p"),
                       (dict(top_k=2.5), "top_k"), (dict(repeat_penalty=0), "repeat_penalty"),
                       (dict(repeat_window=RING + 1), "repeat_window"), (dict(max_tokens=-1), "max_tokens"),
                       (dict(stop=[1]), "stop"), (dict(stop_token_ids=[-3]), "stop_token_ids"),
                       (dict(temperature=float("nan")), "temperature"), (dict(seed=-1), "seed")]:
        with pytest.raises(InputError, match=match):
            SamplingParams(**bad)


def test_params_from_dict_and_describe():
    p = SamplingParams.from_dict({"temperature": 1.2, "seed": "", "stop": ["\n\n"]})
    assert p.temperature == 1.2 and p.seed is None and p.stop == ["\n\n"] and p.top_k == 40
    assert SamplingParams.from_dict(p.as_dict()) == p
    assert SamplingParams.from_dict({"top_k": 5}, base=GREEDY).temperature == 0
    with pytest.raises(InputError, match="unknown generation setting.*temprature"):
        SamplingParams.from_dict({"temprature": 1})
    info = {d["name"]: d for d in SamplingParams.describe()}
    assert set(info) == set(SamplingParams.field_names()) - set(SamplingParams.API_ONLY)
    assert info["top_p"]["default"] == 0.95 and info["top_p"]["max"] == 1.0 and info["top_p"]["label"]


def test_uniform_is_deterministic_and_uniform():
    u = np.array([uniform(12345, pos) for pos in range(20000)])
    assert u.min() >= 0 and u.max() < 1
    assert uniform(12345, 7) == uniform(12345, 7) != uniform(12346, 7) != uniform(12345, 8)
    assert uniform(1 << 40, 7) != uniform(0, 7)        # the seed's high word counts too
    counts = np.histogram(u, bins=10, range=(0, 1))[0]
    assert np.all(np.abs(counts - 2000) < 200)          # about 4.5 sigma


def test_kept_tokens_by_hand():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], np.float32))
    base = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0)

    def kept(**kw):
        return kept_tokens(logits, SamplingParams(**{**base, **kw}))[0].tolist()

    assert kept() == [0, 1, 2, 3, 4]
    assert kept(top_k=3) == [0, 1, 2]
    assert kept(top_p=0.6) == [0, 1]              # 0.5 < 0.6 <= 0.7
    assert kept(top_p=0.0) == [0]
    assert kept(min_p=0.25) == [0, 1, 2]          # p >= 0.125
    assert kept(top_k=4, top_p=0.8) == [0, 1, 2]  # 0.8 of the top-4 mass 0.95 is 0.76: 0.5 + 0.2 + 0.15
    probs = kept_tokens(logits, SamplingParams(**{**base, "top_k": 2}))[1]
    np.testing.assert_allclose(probs, [0.5 / 0.7, 0.2 / 0.7], rtol=1e-6)
    # penalty: positive logits divided, negative multiplied, each distinct token once
    z = np.array([2.0, -1.0, 0.5], np.float32)
    from cera_web.sampling import penalise
    np.testing.assert_allclose(penalise(z, [0, 1, 0], 2.0), [1.0, -2.0, 0.5])


@pytest.mark.parametrize("pieces, stops, shown, stopped", [
    (["Hel", "lo wor", "ld"], ["world"], "Hello ", True),
    (["a", "b", "c"], ["bc"], "a", True),
    (["ab", "x", "abc"], ["abc"], "abx", True),      # "ab" held back, released when "x" rules the stop out
    (["one\n", "\ntwo"], ["\n\n"], "one", True),
    (["END"], ["END"], "", True),
    (["say ", "END", " more"], ["END", "say"], "", True),   # the earliest stop in the text wins
    (["abc", "def"], [], "abcdef", False),
    (["the ans", "wer is:"], [" is:!"], "the answer is:", False),  # held " is:" is released by flush()
])
def test_stop_matcher(pieces, stops, shown, stopped):
    m = StopMatcher(stops)
    out, hit = [], False
    for p in pieces:
        text, hit = m.push(p)
        out.append(text)
        if hit:
            break
    if not hit:
        out.append(m.flush())
    assert "".join(out) == shown and hit == stopped
    for s in stops:
        assert s not in "".join(out)


# -- the sampler kernel on constructed logits -------------------------------------------------------------------------

class Harness:
    """sample.wgsl for a vocabulary of V with its own logits/tokens/log/step buffers; `path` says which way the last
    draw went ("fast": the candidate list, "radix": the whole-vocabulary fallback)."""

    def __init__(self, dev, V):
        self.dev, self.V = dev, V
        self.logits = dev.create_buffer(4 * V)
        self.tokens = dev.create_buffer(16)
        self.log = dev.create_buffer(4 * 256)
        self.step = dev.create_buffer(16, kind="uniform")
        self.sampler = GPUSampler(dev, V, self.logits, self.tokens, self.log, self.step, probe=True)

    @property
    def path(self):
        return {1: "fast", 2: "radix"}.get(int(np.frombuffer(run(self.dev.read(self.tokens, 4, 4)), np.uint32)[0]))

    def draw(self, logits, params, seeds, pos, history=(), allowed=None):
        """One draw per seed, for position pos, after the tokens `history` at positions 0..len-1; allowed: a
        boolean mask over the vocabulary (a grammar's), or None."""
        self.dev.write_buffer(self.logits, np.asarray(logits, np.float32))
        self.sampler.set_history(list(history))
        if allowed is not None:
            bits = np.zeros(32 * -(-self.V // 32), bool)
            bits[:self.V] = allowed
            self.sampler.set_mask(np.packbits(bits, bitorder="little").view(np.uint32))
        out = []
        for start in range(0, len(seeds), 256):
            batch = seeds[start:start + 256]
            for i, seed in enumerate(batch):
                self.sampler.set_params(params, seed, masked=allowed is not None)
                self.dev.write_buffer(self.step, struct.pack("<4I", 1, pos - 1, i, pos))
                self.dev.submit([self.sampler.plan])
            out += np.frombuffer(run(self.dev.read(self.log, 0, 4 * len(batch))), np.uint32).tolist()
        return out


@pytest.fixture(scope="module")
def harness():
    from cera_web.gpu.native import NativeDevice
    dev = NativeDevice.create()
    yield Harness(dev, 3001)         # not a multiple of the 256-thread workgroup
    dev.destroy()


OFF = dict(top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0)


@pytest.mark.gpu
def test_greedy_is_argmax_with_lowest_index_on_ties(harness):
    from cera_web import kernels
    rng = np.random.default_rng(1)
    logits = rng.standard_normal(harness.V).astype(np.float32)
    logits[[2900, 1234, 77]] = 9.5                         # tied maxima: the lowest index wins
    for params in (GREEDY, SamplingParams(temperature=0.9, top_k=1, repeat_penalty=1.0)):
        assert harness.draw(logits, params, [1, 2, 3], 5) == [77, 77, 77]
    # the same as the argmax kernel that greedy plans use
    dev = harness.dev
    pipe = dev.pipeline(kernels.argmax(harness.V))
    dev.submit([dev.record([(pipe, dev.bind(pipe, [harness.logits, harness.tokens, harness.log, harness.step]),
                            (1, 1, 1))])])
    assert np.frombuffer(run(dev.read(harness.log, 0, 4)), np.uint32)[0] == 77


@pytest.mark.gpu
@pytest.mark.parametrize("settings, path", [
    (dict(), "fast"),                                                  # the defaults, penalty included
    (dict(temperature=0.5, top_k=7, top_p=1.0, min_p=0.0), "fast"),
    (dict(temperature=1.3, top_k=0, top_p=0.6, min_p=0.0), "fast"),
    (dict(temperature=0.8, top_k=50, top_p=0.9, min_p=0.02, repeat_penalty=1.4, repeat_window=6), "fast"),
    (dict(temperature=0.01, top_k=0, top_p=0.99), "fast"),             # underflowing probabilities
    (dict(temperature=1.0, top_k=5000, top_p=0.0), "fast"),            # top-k over the vocabulary: off; top-p 0
    (dict(temperature=1.0, **OFF), "radix"),                           # every token kept
    (dict(temperature=1.0, top_k=2000, top_p=1.0, min_p=0.0), "radix"),   # too many candidates
    (dict(temperature=3.0, top_k=0, top_p=0.9, min_p=0.0), "radix"),
    (dict(temperature=3.0, top_k=2500, top_p=0.8, min_p=0.0, repeat_penalty=0.8), "radix"),
    (dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.001), "radix"),
])
def test_kernel_matches_numpy_specification(harness, settings, path):
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal(harness.V) * 2.5).astype(np.float32)
    logits[rng.integers(0, harness.V, 40)] = 4.0               # ties among the likely tokens
    history = rng.integers(0, harness.V, 20).tolist() + [int(np.argmax(logits))]
    params = SamplingParams(**settings)
    seeds = list(range(100, 140))
    got = harness.draw(logits, params, seeds, len(history), history)
    want = [sample_numpy(logits, params, history, uniform(s, len(history))) for s in seeds]
    assert harness.path == path
    # the kernel sums in float32, the specification in float64: a draw may differ only where u lies within
    # rounding of a step of the cumulative distribution
    assert sum(g != w for g, w in zip(got, want)) <= 2
    for g, s in zip(got, seeds):
        assert_consistent(logits, params, history, uniform(s, len(history)), g)


def assert_consistent(logits, params, history, u, got, tol=1e-5):
    """`got` is kept, and u falls in its step of the cumulative distribution (index order), give or take tol."""
    keep, probs = kept_tokens(logits, params, history)
    assert got in keep
    j = int(np.searchsorted(keep, got))
    cum = np.cumsum(probs)
    lo, hi = (cum[j - 1] if j else 0.0), cum[j]
    assert lo - tol <= u < hi + tol, (got, u, lo, hi)


def candidates(V, probs, ids):
    """Logits whose softmax puts probabilities `probs` on tokens `ids` and a negligible remainder elsewhere."""
    logits = np.full(V, -30.0, np.float32)
    logits[ids] = np.log(probs)
    return logits


@pytest.mark.gpu
@pytest.mark.parametrize("settings, allowed", [
    (dict(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0), [0, 1, 2]),
    (dict(temperature=1.0, top_k=0, top_p=0.75, min_p=0.0), [0, 1, 2]),      # 0.4 + 0.25 < 0.75 <= 0.8
    (dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.3), [0, 1, 2]),       # p >= 0.12
    (dict(temperature=0.5, top_k=0, top_p=1.0, min_p=0.06), [0, 1, 2, 3]),  # at T 0.5: p^2 / 0.16 >= 0.06
    (dict(temperature=2.0, top_k=5, top_p=0.8, min_p=0.0), [0, 1, 2, 3]),    # sqrt(p), top 5: cum 0.73, 0.88
])
def test_filters_never_pick_excluded_tokens(harness, settings, allowed):
    probs = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    ids = np.array([2999, 5, 1500, 256, 1024, 40])     # scattered over the vocabulary, not in order
    logits = candidates(harness.V, probs, ids)
    params = SamplingParams(repeat_penalty=1.0, **settings)
    n = 400
    got = harness.draw(logits, params, list(range(n)), 3)
    assert set(got) <= set(ids[allowed].tolist())
    # the empirical distribution: softmax(logit / T) renormalised over the allowed tokens (chi-square, generous)
    w = probs[allowed] ** (1.0 / params.temperature)
    expected = n * w / w.sum()
    counts = np.array([got.count(int(t)) for t in ids[allowed]])
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 25, (counts, expected)      # df <= 3: p < 1e-4 for an unbiased sampler


@pytest.mark.gpu
def test_repetition_penalty(harness):
    V = harness.V
    logits = np.full(V, -10.0, np.float32)
    logits[[10, 20, 30, 40]] = [5.0, 4.0, -1.0, -1.2]
    g = GREEDY.replace(repeat_penalty=1.5)
    assert harness.draw(logits, g, [0], 1, [10]) == [20]                           # 5 / 1.5 < 4
    assert harness.draw(logits, g.replace(repeat_window=3), [0], 4, [10, 7, 7, 7]) == [10]   # outside the window
    assert harness.draw(logits, g.replace(repeat_penalty=1.2), [0], 2, [10, 10]) == [10]    # once: 4.17 > 4
    neg = logits.copy()
    neg[[10, 20]] = -10.0
    assert harness.draw(neg, g, [0], 1, [30]) == [40]                              # -1 * 1.5 < -1.2
    # the kernel appends what it draws to the ring: the second draw sees the first one's token
    harness.draw(logits, g, [0], 5, [])
    harness.sampler.set_params(g, 0)
    harness.dev.write_buffer(harness.step, struct.pack("<4I", 1, 5, 1, 6))
    harness.dev.submit([harness.sampler.plan])
    assert np.frombuffer(run(harness.dev.read(harness.log, 0, 8)), np.uint32).tolist() == [10, 20]
    # sampled: a penalised token's probability drops by the expected factor
    logits = candidates(V, np.array([0.5, 0.5]), [10, 20])
    params = SamplingParams(**{**OFF, "temperature": 1.0, "repeat_penalty": 2.0})
    got = harness.draw(logits, params, list(range(300)), 1, [10])
    # log(0.5) < 0 is multiplied by 2: p(10) : p(20) = 0.25 : 0.5
    assert abs(got.count(10) / 300 - 1 / 3) < 0.1


# -- generation with the real model ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine(smollm2_gguf):
    from cera_web.engine import Engine
    eng = run(Engine.load(smollm2_gguf, context_size=96, chunk=8))
    yield eng
    eng.close()


@pytest.mark.gpu
def test_temperature_0_and_top_k_1_equal_greedy(engine):
    p = PROMPTS["raw_capital"]
    want = p["greedy_ids"][:6]
    assert run(engine.generate(p["prompt_ids"], temperature=0, max_tokens=6)).tokens == want
    res = run(engine.generate(p["prompt_ids"], temperature=0.8, top_k=1, repeat_penalty=1.0, max_tokens=6,
                              reuse_cache=True))
    assert res.tokens == want and res.seed is None      # through the sampler kernel's greedy path
    assert res.cached_tokens == len(p["prompt_ids"]) - 1


@pytest.mark.gpu
def test_sampler_on_real_logits_matches_specification(engine):
    """The full 49152-token vocabulary: the engine's sampler plan against sample_numpy on the logits read back."""
    from cera_web.sampling import GPUSampler
    model, ids = engine.model, PROMPTS["raw_capital"]["prompt_ids"]
    for start in range(0, len(ids), model.chunk):
        model.prefill(ids[start:start + model.chunk], start, with_head=start + model.chunk >= len(ids))
    logits = np.frombuffer(run(engine.dev.read(model.logits, 0, 4 * model.vocab)), np.float32)
    sampler = GPUSampler.for_model(model)
    sampler.set_history(ids)
    for params in (SamplingParams(), SamplingParams(temperature=1.5, **OFF), SamplingParams(repeat_penalty=1.5)):
        for seed in range(6):
            sampler.set_params(params, seed)
            engine.dev.submit([sampler.plan])        # the step uniform still says: position len(ids), log[0]
            got = run(model.read_log(1))[0]
            assert_consistent(logits, params, ids, uniform(seed, len(ids)), got)


@pytest.mark.gpu
def test_seeded_runs_reproduce(engine):
    ids = PROMPTS["raw_capital"]["prompt_ids"]
    # ignore_eos: a fresh seed may draw the end-of-turn token early; the test wants 6 tokens whatever the seed
    params = SamplingParams(temperature=1.0, max_tokens=6, ignore_eos=True)
    first = run(engine.generate(ids, params, reuse_cache=True))     # seed None: a fresh one, reported
    assert isinstance(first.seed, int)
    again = run(engine.generate(ids, params, seed=first.seed, reuse_cache=True))
    assert again.tokens == first.tokens and again.text == first.text and len(first.tokens) == 6


@pytest.mark.gpu
def test_stop_strings_split_across_tokens(engine):
    ids = PROMPTS["raw_capital"]["prompt_ids"]           # greedy: " Paris" "." "\n" "\n" "The" " answer" " is" ":"
    pieces = []
    res = run(engine.generate(ids, max_tokens=8, stop=["s.\n"], on_token=lambda t, s: pieces.append(s),
                              reuse_cache=True))
    assert res.stop_reason == "stop" and res.stop_sequence == "s.\n"
    assert res.text == "".join(pieces) == " Pari"
    assert res.tokens == [7042, 30, 198]
    # a stop string never completed: the text it held back is released at the end
    pieces = []
    res = run(engine.generate(ids, max_tokens=8, stop=[" is:!"], on_token=lambda t, s: pieces.append(s),
                              reuse_cache=True))
    assert res.stop_reason == "max_tokens" and res.text == "".join(pieces) == " Paris.\n\nThe answer is:"
    assert pieces[-2:] == ["", " is:"]                  # " is" held back until the last token


@pytest.mark.gpu
def test_cancel_mid_decode_and_during_prefill(engine, monkeypatch, cancel_in_prefill):
    p = PROMPTS["raw_capital"]
    engine.steps_per_read = 4
    seen = []

    def on_token(tok, text):
        seen.append(tok)
        if len(seen) == 2:
            engine.cancel()

    res = run(engine.generate(p["prompt_ids"], max_tokens=10, on_token=on_token, reuse_cache=True))
    assert res.stop_reason == "cancelled" and res.tokens == seen == p["greedy_ids"][:2]
    assert res.text == engine.tokenizer.decode(p["greedy_ids"][:2])

    # during prefill: stops after the chunk in flight
    q = PROMPTS["chat_capital"]                          # 37 tokens: chunks of 8
    calls = cancel_in_prefill(engine)
    res = run(engine.generate(q["prompt_ids"], max_tokens=4))
    assert res.stop_reason == "cancelled" and res.tokens == [] and calls == [0]
    monkeypatch.undo()
    # still consistent: the cache holds the first chunk, and the rest of the prompt continues from it
    res = run(engine.generate(q["prompt_ids"], max_tokens=3, reuse_cache=True))
    assert res.cached_tokens == 8 and res.tokens == q["greedy_ids"][:3]


@pytest.mark.gpu
def test_stop_token_ids_and_ignore_eos(engine):
    p = PROMPTS["chat_capital"]                         # greedy: "The capital of France is Paris." <|im_end|>
    eos = p["eos_position"]
    res = run(engine.generate(p["prompt_ids"], max_tokens=12, stop_token_ids=[30], reuse_cache=True))
    assert res.stop_reason == "stop" and res.stop_sequence == 30 and res.tokens == p["greedy_ids"][:6]
    # the KV cache holds the prompt: only its last token is prefilled again
    res = run(engine.generate(p["prompt_ids"], max_tokens=eos + 2, ignore_eos=True, reuse_cache=True))
    assert res.cached_tokens == len(p["prompt_ids"]) - 1
    assert res.tokens == p["greedy_ids"][:eos + 2] and res.stop_reason == "max_tokens"


@pytest.mark.gpu
@pytest.mark.parametrize("settings, path", [
    (dict(temperature=0.0, repeat_penalty=1.0), None),                # greedy: the best allowed token
    (dict(temperature=0.0, repeat_penalty=1.3, repeat_window=8), None),
    (dict(), "fast"),
    (dict(temperature=1.0, **OFF), "radix"),
    (dict(temperature=1.3, top_k=0, top_p=0.6, min_p=0.0), "fast"),
    (dict(temperature=2.0, top_k=2500, top_p=1.0, min_p=0.0), "radix"),
])
def test_masked_kernel_matches_numpy_specification(harness, settings, path):
    """A grammar's mask: disallowed tokens are never drawn, and the draw is the specification's on the masked
    logits (the mask applies before temperature, top-k/top-p/min-p: greedy and seeded sampling stay exact)."""
    rng = np.random.default_rng(11)
    logits = (rng.standard_normal(harness.V) * 2.5).astype(np.float32)
    allowed = rng.random(harness.V) < 0.3
    top = np.argsort(-logits)[:50]
    allowed[top[:10]] = False                   # the most likely tokens are forbidden
    allowed[harness.V - 3:] = [True, False, True]   # the partial last vec4 too
    logits[harness.V - 3] = 9.0
    history = rng.integers(0, harness.V, 12).tolist()
    params = SamplingParams(**settings)
    seeds = list(range(300, 340))
    got = harness.draw(logits, params, seeds, len(history), history, allowed=allowed)
    want = [sample_numpy(logits, params, history, uniform(s, len(history)), allowed) for s in seeds]
    assert all(allowed[g] for g in got)
    if path:
        assert harness.path == path
    assert sum(g != w for g, w in zip(got, want)) <= 2
    if params.greedy:
        assert got == want
    # only one token allowed: it is drawn whatever the logits and settings
    only = np.zeros(harness.V, bool)
    only[int(np.argmin(logits))] = True
    assert set(harness.draw(logits, params, seeds[:8], len(history), history, allowed=only)) == {int(np.argmin(logits))}


@pytest.mark.gpu
@pytest.mark.parametrize("settings", [
    dict(temperature=0.0, repeat_penalty=1.0, logprobs=True, top_logprobs=20),
    dict(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, frequency_penalty=0.7,
         presence_penalty=0.4, repeat_window=16, top_logprobs=5),
    dict(temperature=0.7, repeat_penalty=1.2, repeat_window=16, frequency_penalty=-0.5,
         logit_bias={3: 100, 17: -100, 2999: 4.5}, top_logprobs=20),
])
def test_penalties_bias_and_logprobs_match_numpy(harness, settings):
    """frequency/presence penalties count repeats in the window; logit_bias is added first; the logprobs are the
    log-softmax of the values drawn from (float32 on the GPU vs float64 here: within 2e-5) and the top 20 are the
    largest of them, ties to the lowest id."""
    from cera_web.sampling import TOP_LOGPROBS, logprobs_numpy
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal(harness.V) * 2.0).astype(np.float32)
    logits[[10, 11, 12]] = 3.25                                  # a tie among the top
    history = rng.integers(0, 40, 30).tolist()                  # many repeats among few tokens
    params = SamplingParams(**settings)
    seeds = list(range(20))
    allowed = rng.random(harness.V) < 0.5 if params.frequency_penalty < 0 else None
    got = harness.draw(logits, params, seeds, len(history), history, allowed=allowed)
    want = [sample_numpy(logits, params, history, uniform(s, len(history)), allowed) for s in seeds]
    assert sum(g != w for g, w in zip(got, want)) <= 1
    ref = logprobs_numpy(logits, params, history, allowed)
    lps = run(harness.sampler.read_logprobs(len(seeds), params.top_logprobs))
    order = sorted(range(harness.V), key=lambda i: (-ref[i], i))[:params.top_logprobs]
    for tok, lp in zip(got, lps):
        assert abs(lp["logprob"] - ref[tok]) < 2e-5
        ids = [i for i, _ in lp["top_logprobs"]]
        assert ids == order, (ids, order)
        np.testing.assert_allclose([v for _, v in lp["top_logprobs"]], ref[order], atol=2e-5)
    assert TOP_LOGPROBS == 20
    if 17 in params.logit_bias:
        assert 17 not in got and 3 in [i for i, _ in lps[0]["top_logprobs"]][:1]


def test_settings_validation_of_openai_fields():
    with pytest.raises(InputError, match="frequency_penalty must be between -2.0 and 2.0"):
        SamplingParams(frequency_penalty=3)
    with pytest.raises(InputError, match="top_logprobs must be between 0 and 20"):
        SamplingParams(top_logprobs=21)
    with pytest.raises(InputError, match="logit_bias must map"):
        SamplingParams(logit_bias={1: 200})
    with pytest.raises(InputError, match="logit_bias keys must be token ids"):
        SamplingParams(logit_bias={"x": 1})
    assert SamplingParams(logit_bias={"7": -100}).logit_bias == {7: -100.0}
    assert SamplingParams(top_logprobs=3).logprobs
