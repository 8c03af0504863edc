"""Speculative decoding (cera_web.speculative): drafts from a draft model or from prompt lookup, checked by one pass
of the model, never change the greedy output. Each case compares a speculative generation with speculative="off" on
the same engine, token for token, on the CPU model and on the GPU (lavapipe in CI), for every fixture architecture
(LFM2's conv state on the GPU is taken back by re-running the accepted inputs)."""
import asyncio
from pathlib import Path

import numpy as np
import pytest

from cera_web.engine import Engine
from cera_web.errors import InputError
from cera_web.speculative import PromptLookup

SMALL = Path(__file__).parent / "fixtures" / "small"
PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
ARCHS = ["qwen3", "qwen2", "gemma3", "lfm2"]


def run(coro):
    return asyncio.run(coro)


def engines(backend):
    """{arch: an engine of its f32 fixture with the q8_0 fixture of the same model as its draft}: the draft agrees
    with the model most of the time, so rounds accept some drafts and reject others."""
    device = "cpu" if backend == "cpu" else None

    async def load():
        out = {}
        for arch in ARCHS:
            eng = await Engine.load(SMALL / f"{arch}-f32.gguf", device=device, cpu_fallback=False, context_size=128)
            await eng.load_draft(SMALL / f"{arch}-q8_0.gguf")
            out[arch] = eng
        return out
    return run(load())


@pytest.fixture(scope="module", params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def pair(request):
    es = engines(request.param)
    yield request.param, es
    for e in es.values():
        e.close()


async def both(eng, prompt, mode, **kw):
    """(the generation with speculative=mode, the same with speculative="off"), each from a fresh cache; the engine
    holds the speculative one's sequence after it."""
    base = await eng.generate(prompt, reuse_cache=False, speculative="off", **kw)
    spec = await eng.generate(prompt, reuse_cache=False, speculative=mode, **kw)
    return spec, base


def missing_drafter(bad, ready=lambda seq, start: True):
    """A drafter class to put in PromptLookup's place: its drafts never match ([bad] * k), a round is worth it when
    ready(seq, start); Missing.calls: the sequence's length at each draft."""
    class Missing:
        k, calls = 4, []

        def __init__(self, asked=True):
            pass

        async def draft(self, seq, k):
            Missing.calls.append(len(seq))
            return [bad] * k

        def worth(self, seq, start):
            return ready(seq, start)
    return Missing


def spy_reads(monkeypatch) -> list:
    """The reads Speculative.next returns (engine._Read), appended as they come."""
    import cera_web.speculative as spec
    reads, step = [], spec.Speculative.next

    async def next_spy(self):
        reads.append(await step(self))
        return reads[-1]
    monkeypatch.setattr(spec.Speculative, "next", next_spy)
    return reads


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_output_is_the_same_with_drafts(pair, arch):
    backend, es = pair
    eng = es[arch]
    spec, base = run(both(eng, PROMPT, "auto", max_tokens=48, ignore_eos=True))   # auto: the loaded draft model
    assert spec.tokens == base.tokens and spec.text == base.text
    assert spec.stop_reason == base.stop_reason == "max_tokens"
    assert 0 < spec.accepted < spec.drafted, (spec.accepted, spec.drafted)      # both kinds of round ran
    assert base.drafted == 0
    look, _ = run(both(eng, PROMPT, "lookup", max_tokens=48, ignore_eos=True))
    assert look.tokens == base.tokens


@pytest.mark.parametrize("arch", ["qwen3", "lfm2"])
def test_every_draft_accepted_up_to_the_widest_check(pair, arch):
    """The model as its own draft: every draft is accepted, k grows to verify_rows - 1 (15: a check of 16 tokens)."""
    backend, es = pair
    eng = es[arch]
    run(eng.load_draft(SMALL / f"{arch}-f32.gguf"))      # closes the draft it replaces
    try:
        spec, base = run(both(eng, PROMPT, "draft", max_tokens=80, ignore_eos=True))
        assert spec.tokens == base.tokens
        assert spec.accepted == spec.drafted > 60
        assert eng.model.verify_rows == 16
    finally:
        run(eng.load_draft(SMALL / f"{arch}-q8_0.gguf"))


@pytest.mark.parametrize("mode", ["auto", "lookup"])
@pytest.mark.parametrize("arch", ["qwen3", "lfm2"])
def test_limits_and_stops_inside_a_round(pair, arch, mode):
    """max_tokens and the context end in the middle of a round, and a stop token or stop string inside its accepted
    tokens, end the reply where plain decoding does; what the engine then holds continues exactly (the next turn's
    tokens equal a fresh computation's). With the draft model (auto) every round drafts; with prompt lookup many are
    plain rounds."""
    backend, es = pair
    eng = es[arch]
    base = run(eng.generate(PROMPT, reuse_cache=False, speculative="off", max_tokens=40, ignore_eos=True))
    for n in (1, 2, 7):
        spec, ref = run(both(eng, PROMPT, mode, max_tokens=n, ignore_eos=True))
        assert spec.tokens == ref.tokens == base.tokens[:n]
    stop_text = eng.tokenizer.decode(base.tokens[13:15])
    spec, ref = run(both(eng, PROMPT, mode, max_tokens=40, ignore_eos=True, stop=[stop_text]))
    assert (spec.text, spec.stop_reason) == (ref.text, ref.stop_reason)
    # a stop token at each place of the reply (first occurrences): the reply ends where plain decoding's does, and
    # the sequence left (which rounds that ran past the stop took back) continues like a fresh one
    then = eng.tokenizer.encode(" and", add_special=False)
    for i, stop_id in enumerate(base.tokens[:12]):
        if stop_id in base.tokens[:i]:
            continue
        spec, ref = run(both(eng, PROMPT, mode, max_tokens=40, ignore_eos=True, stop_token_ids=[stop_id]))
        assert spec.tokens == ref.tokens == base.tokens[:i] and spec.stop_reason == "stop"
        ids = eng.encode_prompt(PROMPT) + spec.tokens + [stop_id] + then
        kept = run(eng.generate(ids, speculative="off", max_tokens=6, ignore_eos=True))
        fresh = run(eng.generate(ids, speculative="off", max_tokens=6, ignore_eos=True, reuse_cache=False))
        assert kept.cached_tokens >= len(ids) - 1 - len(then) and kept.tokens == fresh.tokens, i
    # the context's end: 128 positions
    ids = eng.encode_prompt(PROMPT)
    long = ids * (120 // len(ids)) + ids[:120 % len(ids)]
    spec, ref = run(both(eng, long, mode, max_tokens=40, ignore_eos=True))
    assert spec.tokens == ref.tokens and spec.stop_reason == ref.stop_reason == "context"


@pytest.mark.parametrize("arch", ["qwen3", "lfm2"])
def test_sampled_output_is_the_same_draws(pair, arch):
    """Sampling: each checked row is drawn as a plain step at its position would be (its random number, the
    penalties over the sequence before it), so a seed gives the same tokens with or without drafts — over many seeds
    the distributions are therefore the same. Settings: the chat defaults (temperature 0.7, top-k 40, top-p 0.95,
    min-p 0.05, repetition penalty 1.1 over 64 tokens) at a higher temperature, so that drafts are both kept and
    rejected."""
    backend, es = pair
    eng = es[arch]
    kept = drafted = 0
    for seed in range(12 if backend == "gpu" else 40):
        kw = dict(temperature=1.2, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, seed=seed, max_tokens=20,
                  ignore_eos=True)
        spec, base = run(both(eng, PROMPT, "auto", **kw))
        assert spec.tokens == base.tokens, seed
        kept, drafted = kept + spec.accepted, drafted + spec.drafted
    assert 0 < kept < drafted
    look, base = run(both(eng, PROMPT * 2, "lookup", temperature=0.5, seed=5, max_tokens=24, ignore_eos=True,
                          frequency_penalty=0.5))
    assert look.tokens == base.tokens


async def decode_and_verify_logits(eng, ids, p0):
    """(the logits of decode steps fed ids[p0:] one at a time after a prefill of ids[:p0], the logits of one verify
    pass over ids[p0:] after the same prefill), [len(ids) - p0, vocab] each."""
    m, V, n = eng.model, eng.model.spec.vocab, len(ids) - p0

    def prefill():
        for a in range(0, p0, m.chunk):
            m.prefill(ids[a:min(a + m.chunk, p0)], a, with_head=False)
    prefill()
    steps = []
    for p in range(p0, len(ids)):
        m.dev.write_buffer(m.tokens, np.asarray([ids[p]], np.uint32))
        m.decode(p, 0)
        steps.append(np.frombuffer(await m.dev.read(m.logits, 0, 4 * V), np.float32))
    prefill()
    m.verify(ids[p0:], p0)
    return np.stack(steps), np.frombuffer(await m.dev.read(m.verify_logits, 0, 4 * V * n), np.float32).reshape(n, V)


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["qwen2", "gemma3", "lfm2", "split"])
def test_a_verify_pass_gives_each_token_the_logits_of_a_decode_step(case, monkeypatch, tmp_path):
    """With decode products on 8-bit activations (matvec_q8: GPUs; forced here on lavapipe) a verify pass of 16 tokens
    runs the decode kernels on every token (matvec_q8 over the pass's tokens, the decode attention storing the pass's
    cache rows and then attending), so each row's logits are the decode step's bit for bit and a verified token is
    the one plain decoding draws, near-ties included. Cases: Q/K/V biases (qwen2), sliding windows and post-norms
    (gemma3), conv layers (lfm2), and a split decode attention (heads 32 wide, 2 key ranges at context 512) checked
    at positions 300..315, where each row combines both ranges."""
    monkeypatch.setenv("CERA_WEB_INT8", "1")
    if case == "split":
        from cera_web.tools.bench import synthetic_llama
        path = synthetic_llama(tmp_path / "m.gguf", "llama-3.2-1b", "q4_k_m", layers=2, hidden=256, heads=8,
                               kv_heads=2, ffn=512, vocab=512)
        context, p0 = 512, 300
    else:
        path, context, p0 = SMALL / f"{case}-f32.gguf", 128, 40
    ids = [(7 * i * i + 3 * i + 5) % 250 + 1 for i in range(p0 + 16)]

    async def go():
        eng = await Engine.load(path, cpu_fallback=False, context_size=context)
        try:
            assert eng.model.int8 and eng.model.by_steps(16)
            assert max(getattr(op, "split", 1) for op, _ in eng.model.blocks) == (2 if case == "split" else 1)
            return await decode_and_verify_logits(eng, ids, p0)
        finally:
            eng.close()
    steps, verified = run(go())
    assert np.isfinite(steps).all()
    np.testing.assert_array_equal(verified, steps)


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["qwen2", "lfm2"])
def test_short_prompt_chunks_run_the_decode_kernels_on_gpus(case, monkeypatch):
    """On a GPU that is not a CPU adapter (as one here, on lavapipe) a prompt chunk of 2..verify_rows (16) tokens runs
    the verify pass's body, the decode kernels over its tokens (Transformer.body_for: a draft model catching up with
    the 2 tokens of a round that kept every draft, a short chat turn), not the prefill plan sized for a whole chunk;
    1 token the decode plan, 17 the prefill plan. Each draws the prefill plan's token, its logits within rounding of
    the prefill plan's, the KV rows (and LFM2's conv state) of every token written: the next step's logits agree too."""
    path = SMALL / f"{case}-f32.gguf"
    ids = [(7 * i * i + 3 * i + 5) % 250 + 1 for i in range(60)]
    p0 = 20

    async def go(gpu):
        eng = await Engine.load(path, cpu_fallback=False, context_size=128)
        m, V = eng.model, eng.model.spec.vocab
        monkeypatch.setattr(eng.dev, "is_cpu", not gpu)
        plans = []
        submit = eng.dev.submit
        monkeypatch.setattr(eng.dev, "submit", lambda p, *a, **k: (plans.append(p[0]), submit(p, *a, **k))[1])
        try:
            out = {}
            for n in (1, 2, 5, 16, 17):
                m.reset_state()
                m.prefill(ids[:p0], 0, with_head=False)
                plans.clear()
                m.prefill(ids[p0:p0 + n], p0, with_head=True)
                body = plans[0]
                first = np.frombuffer(await m.dev.read(m.logits, 0, 4 * V), np.float32).copy()
                token = (await m.read_log(1))[0]
                m.decode(p0 + n, 0)
                after = np.frombuffer(await m.dev.read(m.logits, 0, 4 * V), np.float32).copy()
                want = m.plan_decode if n == 1 else m.short_body() if gpu and n <= 16 else m.plan_prefill
                assert body is want, (n, gpu)
                out[n] = token, first, after
            return out
        finally:
            eng.close()
    short, plain = run(go(True)), run(go(False))
    for n in short:
        assert short[n][0] == plain[n][0] == int(np.argmax(plain[n][1])), n
        for a, b in zip(short[n][1:], plain[n][1:]):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)


def test_logprobs_are_not_speculated(pair):
    backend, es = pair
    eng = es["qwen3"]
    r = run(eng.generate(PROMPT, logprobs=True, max_tokens=6, ignore_eos=True, speculative="lookup"))
    assert r.drafted == 0 and len(r.logprobs) == 6


def test_a_draft_model_must_share_the_tokenizer():
    async def go():
        eng = await Engine.load(SMALL / "qwen3-f32.gguf", device="cpu", context_size=64)
        try:
            with pytest.raises(InputError, match="has another tokenizer"):
                await eng.load_draft(SMALL / "gemma3-q8_0.gguf")
            assert eng.draft is None
            with pytest.raises(InputError, match="needs a draft model"):
                await eng.generate(PROMPT, max_tokens=4, speculative="draft")
            with pytest.raises(InputError, match="speculative must be one of"):
                await eng.generate(PROMPT, max_tokens=4, speculative="yes")
            await eng.load_draft(SMALL / "lfm2-q8_0.gguf")       # another architecture, the same tokenizer
            spec = await eng.generate(PROMPT, max_tokens=24, ignore_eos=True, reuse_cache=False)
            base = await eng.generate(PROMPT, max_tokens=24, ignore_eos=True, reuse_cache=False, speculative="off")
            assert spec.tokens == base.tokens and spec.drafted > 0
        finally:
            eng.close()
    run(go())


def test_the_openai_api_passes_the_setting_and_reports_drafts(pair):
    backend, es = pair
    eng = es["qwen2"]
    msgs = [{"role": "user", "content": PROMPT}]
    on = run(eng.chat.completions.create(messages=msgs, max_tokens=24, temperature=0, ignore_eos=True))
    off = run(eng.chat.completions.create(messages=msgs, max_tokens=24, temperature=0, ignore_eos=True,
                                          speculative="off"))
    assert on["choices"][0]["message"]["content"] == off["choices"][0]["message"]["content"]
    got = on["usage"]["completion_tokens_details"]
    assert got["accepted_prediction_tokens"] > 0 and got["rejected_prediction_tokens"] > 0
    assert off["usage"]["completion_tokens_details"] == {"accepted_prediction_tokens": 0,
                                                         "rejected_prediction_tokens": 0}


def test_prompt_lookup_takes_the_latest_longest_match():
    look = PromptLookup()

    def draft(seq, k=4):
        return run(look.draft(list(seq), k))

    # the last 3 tokens (7 8 9) occurred at 1 and at 6: the latest wins; k cuts the continuation
    assert draft([0, 7, 8, 9, 1, 2, 7, 8, 9, 3, 4, 5, 7, 8, 9]) == [3, 4, 5, 7]
    assert draft([0, 7, 8, 9, 1, 2, 7, 8, 9, 3, 4, 5, 7, 8, 9], k=2) == [3, 4]
    # no earlier 3-gram: the longest shorter one (8 9 at 2)
    assert draft([5, 8, 9, 6, 1, 8, 9]) == [6, 1, 8, 9]
    assert draft([5, 1, 9, 6, 2, 8, 9]) == [6, 2, 8, 9]     # only the last token (9) matched
    assert draft([1, 2, 3, 4]) == []                         # nothing repeats
    assert draft([4, 4]) == [4]                              # a match right before the end still has a follower
    assert draft([4]) == []


def test_a_drafter_that_misses_rests_for_longer_and_longer(monkeypatch):
    """Rounds that keep no draft make the drafter rest for 1, 2, 4, then 8 plain rounds of 8 steps: on text the
    drafts do not match, speculation falls back to plain decoding (and the output is still the same)."""
    import cera_web.speculative as spec

    async def go():
        eng = await Engine.load(SMALL / "qwen3-f32.gguf", device="cpu", context_size=256)
        try:
            base = await eng.generate(PROMPT, max_tokens=100, ignore_eos=True, speculative="off")
            bad = next(t for t in range(eng.model.vocab) if t not in base.tokens)     # never the model's choice
            monkeypatch.setattr(spec, "PromptLookup", missing_drafter(bad))
            got = await eng.generate(PROMPT, max_tokens=100, ignore_eos=True, speculative="lookup",
                                     reuse_cache=False)
            return base, got
        finally:
            eng.close()
    base, got = run(go())
    assert got.tokens == base.tokens and got.accepted == 0
    # tokens before each draft: 1 (prefill) | +1, rest 1 (8) | +1, rest 2 (16) | +1, rest 4 (32) | +1, rest 8 (64)
    # and k: 4, then one more than the drafts kept (1)
    start = len(got.prompt_tokens)
    assert [n - start for n in spec.PromptLookup.calls] == [1, 10, 27, 60] and got.drafted == 4 + 1 + 1 + 1


@pytest.mark.parametrize("arch", ["qwen3", "lfm2"])
def test_a_rest_runs_as_plain_decoding_with_its_next_batch_in_flight(pair, arch, monkeypatch):
    """While the drafter rests, the steps are plain decoding's batches: on a GPU each batch is submitted before the
    one before it is read (as without speculation), and a stop inside a rest's batch, with the next batch already
    submitted, leaves the state as after the stop (LFM2: its conv states from the step snapshots): the next turn
    continues exactly as a fresh computation."""
    import cera_web.speculative as spec
    backend, es = pair
    eng, m = es[arch], es[arch].model
    base = run(eng.generate(PROMPT, reuse_cache=False, speculative="off", max_tokens=60, ignore_eos=True))
    bad = next(t for t in range(m.vocab) if t not in base.tokens)

    monkeypatch.setattr(spec, "PromptLookup", missing_drafter(bad))   # rests of 8, 16, 32, then 64 plain steps
    spied = spy_reads(monkeypatch)
    got = run(eng.generate(PROMPT, reuse_cache=False, speculative="lookup", max_tokens=60, ignore_eos=True))
    assert got.tokens == base.tokens and got.accepted == 0
    # after each round (1 token) a rest of 1, 2, then 4 batches of 8 steps (60 tokens with the prefill's), the next
    # batch in flight while one is read on a GPU
    gpu = backend == "gpu"
    reads = [(len(r.tokens), r.ahead) for r in spied]
    assert reads == [(1, False), (8, False), (1, False), (8, gpu), (8, False), (1, False)] + [(8, gpu)] * 3 + \
        [(8, False)]
    then = eng.tokenizer.encode(" and", add_special=False)
    starts = [i for i in range(12, 59) if base.tokens[i] not in base.tokens[:i]][:4]     # in rests of 16 and 32
    assert len(starts) >= 2, base.tokens
    for i in starts:
        stop_id = base.tokens[i]
        got = run(eng.generate(PROMPT, reuse_cache=False, speculative="lookup", max_tokens=60, ignore_eos=True,
                               stop_token_ids=[stop_id]))
        assert got.tokens == base.tokens[:i] and got.stop_reason == "stop"
        ids = eng.encode_prompt(PROMPT) + got.tokens + [stop_id] + then
        kept = run(eng.generate(ids, speculative="off", max_tokens=6, ignore_eos=True))
        fresh = run(eng.generate(ids, speculative="off", max_tokens=6, ignore_eos=True, reuse_cache=False))
        assert kept.cached_tokens >= len(ids) - 1 - len(then) and kept.tokens == fresh.tokens, i


def test_prompt_lookup_scores_where_it_pays_for_free():
    """PromptLookup.worth: at each position of the reply whose next SCORED tokens are known, how many of the drafts
    lookup would have made there were what came; a round is worth running while the last RECENT of those keep
    min_kept on average: 1 when lookup was asked for (and a round before any position is scored), 2 under "auto"
    (none before)."""
    prompt = list(range(40))
    assert (PromptLookup.SCORED, PromptLookup.RECENT) == (8, 32)
    for asked, m in ((True, 1), (False, 2)):
        def worth(reply):
            return PromptLookup(asked).worth(prompt + reply, len(prompt))
        assert worth(prompt[5:25])                      # a quote: every draft kept
        assert not worth(list(range(100, 140)))         # nothing to look up
        # the first position is scored once 8 tokens follow it (fresh tokens: nothing kept)
        assert worth(list(range(100, 108))) is asked and not worth(list(range(100, 109)))
        lk = PromptLookup(asked)
        for kept, want in (([m, m, 0, 2 * m], True), ([m, m, 0, 2 * m - 1], False), ([0] * 5 + [m] * 32, True),
                           ([0] * 5 + [m] * 31 + [0], False)):
            lk.kept, lk.next = list(kept), 10 ** 6      # nothing new to score
            assert lk.worth(prompt, 0) is want, (asked, kept)


def test_a_stretch_goes_on_while_drafting_is_not_worth_it(pair, monkeypatch):
    """A plain stretch is a batch of 8 steps, then while the drafter says a round is not worth it plain decoding's
    batches (the pacer's size; here the engine's fixed 4 steps a read), in flight as plain decoding; it ends where
    the drafter says a round is worth it (on the tokens read when the next batch is submitted: one batch later on a
    GPU)."""
    import cera_web.speculative as spec
    backend, es = pair
    eng = es["qwen3"]
    base = run(eng.generate(PROMPT, reuse_cache=False, speculative="off", max_tokens=60, ignore_eos=True))
    bad = next(t for t in range(eng.model.vocab) if t not in base.tokens)

    Late = missing_drafter(bad, lambda seq, start: len(seq) - start >= 40)     # worth it from 40 reply tokens
    monkeypatch.setattr(spec, "PromptLookup", Late)
    spied = spy_reads(monkeypatch)
    monkeypatch.setattr(eng, "steps_per_read", 4)
    got = run(eng.generate(PROMPT, reuse_cache=False, speculative="lookup", max_tokens=60, ignore_eos=True))
    assert got.tokens == base.tokens
    start = len(got.prompt_tokens)
    gpu = backend == "gpu"
    assert Late.calls[0] - start == (45 if gpu else 41)
    reads = [(len(r.tokens), r.ahead) for r in spied]
    assert reads[:10 if gpu else 9] == ([(8, True)] + [(4, True)] * 8 + [(4, False)] if gpu else
                                        [(8, False)] + [(4, False)] * 8)


def test_auto_looks_up_where_a_verify_pass_is_cheap(pair, monkeypatch):
    """speculative="auto" (the default) without a draft model: prompt lookup on a GPU, where a verify pass costs a
    few decode steps, and on the CPU model, whose products batch the rows (16 for ~5 steps), rounds running only
    where lookup has been keeping drafts; plain decoding on CPU adapters (lavapipe, SwiftShader), where a verify pass
    costs a step per token. The same tokens."""
    from cera_web.sampling import SamplingParams
    from cera_web.speculative import drafter
    backend, es = pair
    eng = es["qwen3"]
    monkeypatch.setattr(eng, "draft", None)
    auto = SamplingParams(max_tokens=80, ignore_eos=True)
    assert auto.speculative == "auto"
    if backend == "gpu":
        assert drafter(eng, auto) is None                                  # lavapipe
        monkeypatch.setattr(eng.dev, "is_cpu", False)                      # as on a real GPU
    assert isinstance(drafter(eng, auto), PromptLookup) and drafter(eng, auto).min_kept == 2.0
    assert drafter(eng, SamplingParams(speculative="lookup")).min_kept == 1.0
    reads = spy_reads(monkeypatch)
    got, base = run(both(eng, PROMPT, "auto", max_tokens=80, ignore_eos=True))
    assert got.tokens == base.tokens and reads
