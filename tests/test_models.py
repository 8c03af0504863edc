"""Qwen2, Qwen3 and LFM2 on the GPU (native wgpu; lavapipe on CI) against transformers.

tests/fixtures/make_small_models.py built small random-weight models with transformers (Qwen2ForCausalLM with q/k/v
biases and an untied head; Qwen3ForCausalLM with QK-norm and head size 32 != hidden / heads; Lfm2ForCausalLM with
four short-convolution and two attention layers, L_cache 3; all GQA 4 query heads over 2 KV heads), wrote each as an
F32 and a Q8_0 GGUF, and recorded transformers' float32 logits at every prompt position and for 16 greedy decode
steps (the Q8_0 reference was computed from the dequantized weights). The engine keeps float32 activations, so
logits agree to about 5e-5 here (magnitudes up to ~20); LOGIT_TOL leaves room for other GPUs' transcendental
functions. The smallest top-1/top-2 margin of any greedy step in the fixture is 0.05 (reference.json), far above
that tolerance, so greedy tokens must be exact.
"""
import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from cera_web.errors import UnsupportedModelError

gpu = pytest.mark.gpu      # the numpy reference tests at the end need no GPU

SMALL = Path(__file__).parent / "fixtures" / "small"
REF = np.load(SMALL / "reference.npz")
INFO = json.loads((SMALL / "reference.json").read_text())
STEMS = sorted(INFO["files"])          # qwen2-f32, qwen2-q8_0, qwen3-..., lfm2-...
LOGIT_TOL = 1e-3                       # absolute
CHUNK = 4                              # prompts are 11 tokens: chunks of 4, 4 and 3


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def dev():
    from cera_web.gpu.native import NativeDevice
    return NativeDevice.create()       # shared: pipelines compile once for all files


@pytest.fixture(scope="module")
def engines(dev):
    from cera_web.engine import Engine
    cache = {}

    def get(stem):
        if stem not in cache:
            cache[stem] = run(Engine.load(SMALL / f"{stem}.gguf", device=dev, context_size=64, chunk=16))
        return cache[stem]
    return get


def ref(stem, key):
    return REF[f"{stem}/{key}"]


def assert_logits(got, want, what):
    err = np.abs(np.asarray(got) - want).max()
    assert err < LOGIT_TOL, f"{what}: max |logit error| {err:.2e} (tolerance {LOGIT_TOL})"


@gpu
@pytest.mark.parametrize("stem", STEMS)
def test_prompt_logits_every_position(engines, stem):
    """Logits at all 11 prompt positions: the prompt as one chunk, then again in chunks of 4 (the conv state and
    KV cache carry across chunk boundaries; the first pass's state must not leak into the second)."""
    model = engines(stem).model
    ids, want = ref(stem, "prompt_ids").tolist(), ref(stem, "prompt_logits")
    assert_logits(run(model.chunk_logits(ids, 0)), want, f"{stem} one chunk")
    parts = [run(model.chunk_logits(ids[s:s + CHUNK], s)) for s in range(0, len(ids), CHUNK)]
    assert_logits(np.concatenate(parts), want, f"{stem} chunks of {CHUNK}")


@gpu
@pytest.mark.parametrize("stem", STEMS)
def test_weights_split_across_buffers(stem):
    """A device that binds at most 8,192 bytes at once: the embedding table (tied LM head), the projections and the
    FFN matrices are each split into row ranges of their own buffers; the logits at every prompt position and the
    greedy tokens stay those of transformers."""
    from cera_web.engine import Engine
    from cera_web.gpu.native import NativeDevice
    limit = 8192
    dev = NativeDevice.create(limits_override={"max-storage-buffer-binding-size": limit})
    eng = run(Engine.load(SMALL / f"{stem}.gguf", device=dev, context_size=32, chunk=16))
    try:
        pieces = eng.model.split_tensors()
        assert len(pieces["token_embd.weight"]) >= 3 and len(pieces) >= 6
        assert all(buf.size <= limit for parts in pieces.values() for buf, _, _ in parts)
        ids, want = ref(stem, "prompt_ids").tolist(), ref(stem, "prompt_logits")
        assert_logits(run(eng.model.chunk_logits(ids, 0)), want, f"{stem} split weights")
        n = 16 if len(ids) + 16 <= 32 else 32 - len(ids)
        res = run(eng.generate(ids, max_tokens=n, stop_at_eos=False))
        assert res.tokens == ref(stem, "greedy_ids").tolist()[:n]
    finally:
        eng.close()


@gpu
@pytest.mark.parametrize("stem", STEMS)
@pytest.mark.parametrize("chunk", [16, CHUNK])
def test_greedy_decode(engines, stem, chunk):
    """Prefill (one chunk, or chunks of 4), then 16 greedy decode steps on the GPU: every step's logits and token."""
    model = engines(stem).model
    ids, greedy = ref(stem, "prompt_ids").tolist(), ref(stem, "greedy_ids").tolist()
    for s in range(0, len(ids), chunk):
        model.prefill(ids[s:s + chunk], s, with_head=s + chunk >= len(ids))
    assert run(model.read_log(1)) == greedy[:1]
    vocab = model.vocab
    last = np.frombuffer(run(model.dev.read(model.logits, 0, 4 * vocab)), np.float32)
    assert_logits(last, ref(stem, "prompt_logits")[-1], f"{stem} last prompt position")
    want = ref(stem, "decode_logits")
    tokens = []
    for k in range(len(want)):
        model.decode(len(ids) + k, 0)          # input: the token the previous step's argmax left in tokens[0]
        got = np.frombuffer(run(model.dev.read(model.logits, 0, 4 * vocab)), np.float32)
        assert_logits(got, want[k], f"{stem} decode step {k}")
        tokens += run(model.read_log(1))
    assert tokens == greedy[1:]


@gpu
def test_lfm2_generate_chunked_and_fresh_state(dev):
    """Engine.generate with chunk 4 (three prefill chunks through the conv layers) gives transformers' greedy tokens;
    a second generation, after another prompt has left its conv state behind, gives them again (a sequence starting
    at position 0 clears the conv state), and so does one after an explicit reset_state()."""
    from cera_web.engine import Engine
    stem = "lfm2-f32"
    eng = run(Engine.load(SMALL / f"{stem}.gguf", device=dev, context_size=64, chunk=CHUNK))
    ids, greedy = ref(stem, "prompt_ids").tolist(), ref(stem, "greedy_ids").tolist()
    eng.steps_per_read = 4
    first = run(eng.generate(ids, max_tokens=len(greedy), stop_at_eos=False))
    assert first.tokens == greedy
    other = run(eng.generate(ids[::-1], max_tokens=5, stop_at_eos=False))
    assert other.tokens != greedy[:5]
    again = run(eng.generate(ids, max_tokens=len(greedy), stop_at_eos=False))
    assert again.tokens == greedy
    eng.model.reset_state()
    assert run(eng.generate(ids, max_tokens=4, stop_at_eos=False)).tokens == greedy[:4]


# -- the convolution kernel on its own ----------------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("stem", ["lfm2-q8_0", "qwen3-q8_0"])
def test_a_run_stopped_inside_a_read_is_continued_from_where_it_stopped(stem):
    """Decode runs 8 steps a readback; a stop token 3 tokens in leaves 5 steps too many in the cache. The next prompt
    that extends what was kept reuses it (for LFM2: the conv state kept after the last used step is restored) and
    gives the tokens of a run from scratch."""
    from cera_web.engine import Engine
    from cera_web.sampling import GREEDY
    eng = run(Engine.load(SMALL / f"{stem}.gguf", context_size=64, chunk=16))     # its own device (close ends it)
    try:
        eng.steps_per_read = 8
        ids, greedy = ref(stem, "prompt_ids").tolist(), ref(stem, "greedy_ids").tolist()
        k = 3
        assert greedy[k] not in greedy[:k]
        first = run(eng.generate(ids, GREEDY.replace(max_tokens=12, stop_token_ids=[greedy[k]])))
        assert first.tokens[:k] == greedy[:k] and first.stop_reason == "stop"
        follow = ids + greedy[:k + 1] + ids[:5]          # what was kept, the stop token, more text
        again = run(eng.generate(follow, GREEDY.replace(max_tokens=8), reuse_cache=True))
        assert again.cached_tokens == len(ids) + k
        scratch = run(eng.generate(follow, GREEDY.replace(max_tokens=8), reuse_cache=False))
        assert scratch.cached_tokens == 0 and again.tokens == scratch.tokens
    finally:
        eng.close()


@gpu
@pytest.mark.parametrize("stem", ["lfm2-q8_0", "qwen3-q8_0"])
def test_pipelined_decode_equals_one_read_at_a_time(stem):
    """engine._Batches at depth 2 (the next batch submitted before this one's tokens are read, batches in alternate
    halves of the token log, logprob slots and conv snapshots) gives the tokens and logprobs of the loop that reads
    each batch before encoding the next (engine.overlap = False), greedy and seeded; a stop in the first batch, in a
    later one, or at max_tokens leaves the cache (and LFM2's conv state) of the tokens kept: a continuation reusing
    it equals one from scratch."""
    from cera_web.engine import Engine
    from cera_web.sampling import GREEDY
    eng = run(Engine.load(SMALL / f"{stem}.gguf", context_size=96, chunk=16))
    try:
        eng.steps_per_read = 3
        ids, greedy = ref(stem, "prompt_ids").tolist(), ref(stem, "greedy_ids").tolist()
        cases = [GREEDY.replace(max_tokens=10), GREEDY.replace(max_tokens=7, stop_token_ids=[greedy[1]]),
                 GREEDY.replace(max_tokens=12, stop_token_ids=[greedy[5]]),
                 GREEDY.replace(max_tokens=12, stop_token_ids=[greedy[3]]),    # the last step of a batch
                 GREEDY.replace(temperature=1.0, seed=5, top_k=0, top_p=1.0, min_p=0.0, max_tokens=11,
                                logprobs=True, top_logprobs=3)]
        for params in cases:
            runs = []
            for overlap in (False, True):
                eng.overlap = overlap
                r = run(eng.generate(ids, params))
                follow = ids + r.tokens + ([r.stop_sequence] if r.stop_sequence is not None else []) + ids[:4]
                again = run(eng.generate(follow, GREEDY.replace(max_tokens=6), reuse_cache=True))
                fresh = run(eng.generate(follow, GREEDY.replace(max_tokens=6), reuse_cache=False))
                assert again.cached_tokens >= len(ids) and again.tokens == fresh.tokens, (overlap, params)
                runs.append(r)
            assert runs[1].tokens == runs[0].tokens and runs[1].stop_reason == runs[0].stop_reason, params
            assert runs[1].logprobs == runs[0].logprobs, params
        assert [r.stop_reason for r in runs] == ["max_tokens"] * 2
    finally:
        eng.overlap = True
        eng.close()


def conv_reference(bcx, w, state):
    """Token by token, as decoding does: bx = B*x; out = sum_k state[k]*w[:, k] + bx*w[:, L-1]; y = C*out; shift."""
    H, L = w.shape
    state = state.copy()
    ys = []
    for row in bcx:
        b, c, x = row[:H], row[H:2 * H], row[2 * H:]
        bx = b * x
        out = (state * w[:, :L - 1].T).sum(0) + bx * w[:, L - 1]
        ys.append(c * out)
        state = np.concatenate([state[1:], bx[None]], 0)
    return np.array(ys, np.float32), state


@gpu
@pytest.mark.parametrize("L", [2, 3, 5])
def test_conv1d_kernel_chunks_equal_token_by_token(dev, L):
    """A pass over T tokens gives the outputs and leaves the state of T single-token steps (numpy, token by token),
    for passes of 1, 2, 7 tokens in a row (fewer and more tokens than the state holds), H not a multiple of 64."""
    import struct

    from cera_web import kernels
    H, rng = 80, np.random.default_rng(L)
    w = rng.standard_normal((H, L)).astype(np.float32)
    state0 = rng.standard_normal((L - 1, H)).astype(np.float32)
    wb = dev.create_buffer(w.nbytes)
    dev.write_buffer(wb, w)
    sb = dev.create_buffer(state0.nbytes)
    dev.write_buffer(sb, state0)
    T_MAX = 7
    xb, yb = dev.create_buffer(4 * T_MAX * 3 * H), dev.create_buffer(4 * T_MAX * H)
    step = dev.create_buffer(16, kind="uniform")
    pipe = dev.pipeline(kernels.conv1d(H, L))
    plan = dev.record([(pipe, dev.bind(pipe, [xb, wb, sb, yb, step]), (-(-H // 64), 1, 1))])
    state = state0
    for T in (1, 2, 7):
        bcx = rng.standard_normal((T, 3 * H)).astype(np.float32)
        dev.write_buffer(xb, bcx)
        dev.write_buffer(step, struct.pack("<4I", T, 0, 0, T))
        dev.submit([plan])
        y = np.frombuffer(run(dev.read(yb, 0, 4 * T * H)), np.float32).reshape(T, H)
        want_y, state = conv_reference(bcx, w, state)
        np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)
        got_state = np.frombuffer(run(dev.read(sb, 0, state.nbytes)), np.float32).reshape(L - 1, H)
        np.testing.assert_allclose(got_state, state, rtol=1e-6, atol=1e-6)


# -- chat templates from the GGUF metadata --------------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("family", ["qwen2", "qwen3", "lfm2"])
def test_chat_template_renders_like_transformers(engines, family):
    from cera_web.template import ChatTemplate
    eng = engines(f"{family}-q8_0")
    tpl = ChatTemplate.from_metadata(eng.gguf.metadata)
    assert not tpl.is_fallback
    for case in INFO["chat"][family]["cases"]:
        text = tpl.render(case["messages"], add_generation_prompt=case["add_generation_prompt"])
        assert text == case["expected"]
        assert eng.tokenizer.encode(text, add_special=False, parse_special=True) == case["ids"]
    first = INFO["chat"][family]["cases"][0]          # one user message, reply wanted
    assert eng.encode_prompt(first["messages"][0]["content"], chat=True) == first["ids"]


# -- bad input ------------------------------------------------------------------------------------------------------

def load_modified(dev, stem, *, meta=None, drop=()):
    """Build the model from a parsed header with some metadata replaced or tensors removed."""
    from cera_web.engine import Engine
    from cera_web.loading import check, read_header
    from cera_web.source import FileSource
    src = FileSource(SMALL / f"{stem}.gguf")
    g = read_header(src)
    g.metadata.update(meta or {})
    for name in drop:
        del g.tensors[name]
    return run(Engine.load(src, device=dev, context_size=16, chunk=4, header=check(g))).model


@gpu
@pytest.mark.parametrize("l_cache", [1, 17])
def test_lfm2_unsupported_l_cache(dev, l_cache):
    with pytest.raises(UnsupportedModelError, match=rf"layer 0 .*blk\.0\.shortconv\.conv\.weight.*l_cache = "
                                                    rf"{l_cache} is not supported"):
        load_modified(dev, "lfm2-f32", meta={"lfm2.shortconv.l_cache": l_cache})


@gpu
def test_lfm2_l_cache_disagrees_with_taps(dev):
    with pytest.raises(UnsupportedModelError, match=r"layer 0 .*'blk\.0\.shortconv\.conv\.weight' has shape "
                                                    r"\(3, 64\), expected \(4, 64\)"):
        load_modified(dev, "lfm2-f32", meta={"lfm2.shortconv.l_cache": 4})


@gpu
@pytest.mark.parametrize("stem,meta,pattern", [
    ("lfm2-f32", {"lfm2.attention.head_count_kv": [0, 0, 2, 0, 2]}, r"lists 5 values but the model has 6 layers"),
    ("lfm2-f32", {"lfm2.attention.head_count_kv": [0, 0, 2, 0, 1, 0]}, r"differ in head counts"),
    ("lfm2-f32", {"lfm2.attention.head_count_kv": [0, 0, 3, 0, 3, 0]}, r"layer 2: 4 query heads cannot be grouped"),
    ("lfm2-f32", {"lfm2.attention.head_count_kv": [0, 0, 4, 0, 4, 0]},
     r"layer 2: tensor 'blk\.2\.attn_k\.weight' is 32 x 64 .* implies 64 x 64"),
    ("lfm2-f32", {"lfm2.attention.head_count_kv": [2, 0, 2, 0, 2, 0]},
     r"layer 0 \(attention\): the model file has no tensor 'blk\.0\.attn_q\.weight'"),
    ("lfm2-f32", {"lfm2.feed_forward_length": 96},
     r"layer 0: tensor 'blk\.0\.ffn_gate\.weight' is 128 x 64 .* implies 96 x 64 \(feed-forward 96"),
    ("qwen3-f32", {"qwen3.attention.head_count": 2},
     r"layer 0: tensor 'blk\.0\.attn_q\.weight' is 128 x 64 .* implies 64 x 64"),
    ("qwen2-f32", {"qwen2.attention.head_count_kv": 4},
     r"layer 0: tensor 'blk\.0\.attn_k\.weight' is 32 x 64 .* implies 64 x 64"),
])
def test_inconsistent_head_counts(dev, stem, meta, pattern):
    with pytest.raises(UnsupportedModelError, match=pattern):
        load_modified(dev, stem, meta=meta)


@gpu
@pytest.mark.parametrize("stem,tensor,pattern", [
    ("lfm2-q8_0", "blk.3.shortconv.in_proj.weight", r"layer 3 \(short convolution\): .*'blk\.3\.shortconv\.in_proj"),
    ("lfm2-q8_0", "blk.5.shortconv.conv.weight", r"layer 5 \(short convolution\): .*'blk\.5\.shortconv\.conv\.weight"),
    ("lfm2-q8_0", "blk.4.attn_k_norm.weight", r"layer 4: .*'blk\.4\.attn_k_norm\.weight'"),
    ("qwen3-q8_0", "blk.2.attn_q_norm.weight", r"layer 2: .*'blk\.2\.attn_q_norm\.weight'"),
    ("qwen2-q8_0", "blk.1.attn_v.bias", r"layer 1: .*'blk\.1\.attn_v\.bias'"),
    ("qwen2-q8_0", "blk.1.attn_output.weight", r"'blk\.1\.attn_output\.weight'"),
])
def test_missing_tensor(dev, stem, tensor, pattern):
    with pytest.raises(UnsupportedModelError, match=pattern):
        load_modified(dev, stem, drop=[tensor])


# -- the numpy reference (cera_web/reference.py) for the same files, no GPU -------------------------------------

@pytest.mark.parametrize("stem", STEMS)
def test_numpy_reference_matches_transformers(stem):
    """The float32 numpy forward pass: every prompt position (one call, then rewound and fed in chunks of 4), then
    16 greedy steps one token at a time, against transformers."""
    from cera_web.reference import ReferenceModel
    m = ReferenceModel.from_gguf(SMALL / f"{stem}.gguf")
    ids, greedy = ref(stem, "prompt_ids").tolist(), ref(stem, "greedy_ids").tolist()
    assert_logits(m.forward(ids, 0), ref(stem, "prompt_logits"), f"{stem} numpy, one call")
    parts = [m.forward(ids[s:s + CHUNK], s) for s in range(0, len(ids), CHUNK)]
    assert_logits(np.concatenate(parts), ref(stem, "prompt_logits"), f"{stem} numpy, chunks")
    steps = [m.forward([t])[0] for t in greedy[:-1]]
    assert_logits(np.array(steps), ref(stem, "decode_logits"), f"{stem} numpy, decode")
    assert m.generate_greedy(ids, len(greedy)) == greedy


# -- text in, text out: the engine natively and the page in the browser ---------------------------------------------

@gpu
@pytest.mark.parametrize("stem", STEMS)
def test_generate_text(engines, stem):
    """Engine.generate from text: the prompt's ids (with BOS where the GGUF adds it), transformers' greedy tokens
    and the text the HF tokenizer decodes them to."""
    case, eng = INFO["files"][stem]["text_case"], engines(stem)
    assert eng.encode_prompt(case["prompt"]) == case["prompt_ids"]
    res = run(eng.generate(case["prompt"], max_tokens=len(case["greedy_ids"])))
    assert (res.tokens, res.text, res.stop_reason) == (case["greedy_ids"], case["text"], "max_tokens")


def _serve(body: bytes):
    def handler(route):
        route.fulfill(status=200, body=body, headers={"Content-Type": "application/octet-stream"})
    return handler


@pytest.mark.browser
def test_page_generates_with_each_family(browser, server_url):
    """The real page (Pyodide + WebGPU in a worker) opened on the LFM2 file, then loading Qwen2 and Qwen3 through the
    Model URL box: each generates transformers' greedy continuation of its text prompt."""
    import re

    from playwright.sync_api import expect
    from cera_web.gguf import open_gguf
    from cera_web.names import display_name
    names = {f: display_name(open_gguf(SMALL / f"{f}-q8_0.gguf")) for f in ("lfm2", "qwen2", "qwen3")}
    context = browser.new_context()
    page = context.new_page()
    try:
        for family in ("lfm2", "qwen2", "qwen3"):
            page.route(f"{server_url}/fake/{family}.gguf", _serve((SMALL / f"{family}-q8_0.gguf").read_bytes()))
        page.goto(f"{server_url}/?model=/fake/lfm2.gguf&backend=webgpu")
        status = page.get_by_role("status")
        for family in ("lfm2", "qwen2", "qwen3"):
            if family != "lfm2":
                if page.locator("#drawer").get_attribute("open") is None:   # model controls fold once one loaded
                    page.locator("#drawer > summary").click()
                page.get_by_label("Model URL").fill(f"/fake/{family}.gguf")
                page.get_by_role("button", name="Load").click()
                expect(page.locator("#model-name")).to_have_text(names[family], timeout=300_000)
            expect(status).to_have_text(re.compile(r"Ready"), timeout=300_000)
            expect(page.locator("#model-name")).to_have_text(names[family])
            expect(page.locator("#model-name")).to_have_attribute("title", f"{family}.gguf")
            page.get_by_label("Raw completion").check()
            case = INFO["files"][f"{family}-q8_0"]["text_case"]
            page.get_by_label("Prompt", exact=True).fill(case["prompt"])
            page.get_by_label("Max tokens").fill(str(len(case["greedy_ids"])))
            page.get_by_label("Chat template").set_checked(False)
            page.get_by_role("button", name="Generate").click()
            expect(status).to_have_text(re.compile(r"^Ready \("), timeout=300_000)
            assert page.get_by_role("region", name="Output").text_content() == case["text"], family
    finally:
        context.close()
