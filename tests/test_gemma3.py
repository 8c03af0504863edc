"""Gemma 3 against transformers: the tiny random-weight fixture (tests/fixtures/make_gemma3_fixture.py: 7 layers, six
local with a sliding window of 8 and one global, prompts of 21 tokens, F32 and Q8_0) on the GPU (native wgpu;
lavapipe on CI) and in the numpy reference. The real Gemma 3 270M checkpoint: tests/test_real_models.py.

Tiny fixture: float32 activations follow transformers to about 1e-5 (logits up to ~15); LOGIT_TOL = 1e-3 as for the
other small models; the smallest greedy margin is 0.13, so greedy tokens are exact.
"""
import asyncio
import json
from pathlib import Path

import numpy as np
import pytest


SMALL = Path(__file__).parent / "fixtures" / "small"
REF = np.load(SMALL / "gemma3_reference.npz")
INFO = json.loads((SMALL / "gemma3_reference.json").read_text())
STEMS = sorted(INFO["files"])            # gemma3-f32, gemma3-q8_0
LOGIT_TOL = 1e-3
CHUNK = 4                                # 21-token prompts: five chunks of 4 and one of 1


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def dev():
    from cera_web.gpu.native import NativeDevice
    return NativeDevice.create()


def ref(stem, key):
    return REF[f"{stem}/{key}"]


def assert_logits(got, want, what, tol=LOGIT_TOL):
    err = np.abs(np.asarray(got) - want).max()
    assert err < tol, f"{what}: max |logit error| {err:.2e} (tolerance {tol})"


def test_spec_reads_the_gemma3_layout():
    from cera_web.gguf import open_gguf
    from cera_web.models.spec import model_spec
    s = model_spec(open_gguf(SMALL / "gemma3-f32.gguf"))
    assert [la.sliding_window for la in s.layers] == [8] * 5 + [None, 8]
    assert [la.rope_theta for la in s.layers] == [1e4] * 5 + [1e6, 1e4]
    assert (s.head_dim, s.hidden, s.heads, s.kv_heads, s.activation) == (32, 64, 4, 2, "gelu_tanh")
    assert s.embed_scale == 8.0 and abs(s.query_scale - 32 ** -0.5) < 1e-12 and s.qk_norm and s.rope_neox
    assert s.lm_head == "token_embd.weight" and "blk.6.post_ffw_norm.weight" in s.tensors


@pytest.mark.gpu
@pytest.mark.parametrize("stem", STEMS)
def test_prompt_logits_every_position(dev, stem):
    """All 21 prompt positions (13 past the window), as one chunk and in chunks of 4."""
    from cera_web.engine import Engine
    eng = run(Engine.load(SMALL / f"{stem}.gguf", device=dev, context_size=64, chunk=32))
    ids, want = ref(stem, "prompt_ids").tolist(), ref(stem, "prompt_logits")
    assert_logits(run(eng.model.chunk_logits(ids, 0)), want, f"{stem} one chunk")
    parts = [run(eng.model.chunk_logits(ids[s:s + CHUNK], s)) for s in range(0, len(ids), CHUNK)]
    assert_logits(np.concatenate(parts), want, f"{stem} chunks of {CHUNK}")


@pytest.mark.gpu
@pytest.mark.parametrize("stem", STEMS)
@pytest.mark.parametrize("chunk", [32, CHUNK])
def test_greedy_decode(dev, stem, chunk):
    """Prefill, then 16 decode steps (positions 21..36, every one past the window): each step's logits and token."""
    from cera_web.engine import Engine
    eng = run(Engine.load(SMALL / f"{stem}.gguf", device=dev, context_size=64, chunk=chunk))
    model = eng.model
    ids, greedy = ref(stem, "prompt_ids").tolist(), ref(stem, "greedy_ids").tolist()
    for s in range(0, len(ids), chunk):
        model.prefill(ids[s:s + chunk], s, with_head=s + chunk >= len(ids))
    assert run(model.read_log(1)) == greedy[:1]
    want = ref(stem, "decode_logits")
    tokens = []
    for k in range(len(want)):
        model.decode(len(ids) + k, 0)
        got = np.frombuffer(run(model.dev.read(model.logits, 0, 4 * model.vocab)), np.float32)
        assert_logits(got, want[k], f"{stem} decode step {k}")
        tokens += run(model.read_log(1))
    assert tokens == greedy[1:]


@pytest.mark.gpu
def test_generate_text_case_with_split_embedding(dev):
    """Engine.generate from the text prompt (our SentencePiece tokenizer gives the ids sentencepiece gave), on a device
    binding at most 16 KiB (one layer's KV cache for 64 tokens): the embedding table / tied head is split across buffers; the greedy text is transformers'."""
    from cera_web.engine import Engine
    from cera_web.gpu.native import NativeDevice
    case = INFO["files"]["gemma3-q8_0"]["text_case"]
    small = NativeDevice.create(limits_override={"max-storage-buffer-binding-size": 16384})
    eng = run(Engine.load(SMALL / "gemma3-q8_0.gguf", device=small, context_size=64, chunk=8))
    try:
        assert len(eng.model.split_tensors()["token_embd.weight"]) >= 2
        assert eng.tokenizer.encode(case["prompt"]) == case["prompt_ids"]
        res = run(eng.generate(case["prompt"], max_tokens=len(case["greedy_ids"]), stop_at_eos=False))
        assert res.tokens == case["greedy_ids"]
        assert res.text == case["text"]
    finally:
        eng.close()


@pytest.mark.parametrize("stem", STEMS)
def test_numpy_reference(stem):
    """The numpy reference reads the same spec: every prompt position in one call, then the 16 decode steps."""
    from cera_web.reference import ReferenceModel
    m = ReferenceModel.from_gguf(SMALL / f"{stem}.gguf")
    ids = ref(stem, "prompt_ids").tolist()
    assert_logits(m.forward(ids, 0), ref(stem, "prompt_logits"), f"{stem} reference prompt")
    greedy = ref(stem, "greedy_ids").tolist()
    for k, want in enumerate(ref(stem, "decode_logits")):
        assert_logits(m.forward([greedy[k]])[-1], want, f"{stem} reference decode {k}")
