"""The GPU engine (native wgpu; lavapipe on CI) against the transformers reference fixture for SmolLM2-135M.

tests/fixtures/make_reference.py made tests/fixtures/smollm2_reference.json with transformers (float32, weights
dequantized from the same Q4_1 GGUF). The engine keeps float32 activations, so logits agree to about 1e-4; the
smallest top-1/top-2 margin among the fixture's greedy steps is 0.029, far above that, so greedy tokens must be exact.
"""
import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from cera_web.errors import ContextOverflowError, InputError

pytestmark = pytest.mark.gpu

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "smollm2_reference.json").read_text())
PROMPTS = {p["name"]: p for p in FIXTURE["prompts"]}
LOGIT_TOL = 2e-3   # absolute, on logits of magnitude ~10-30


@pytest.fixture(scope="module")
def engine(smollm2_gguf):
    from cera_web.engine import Engine
    # chunk 16 < the chat prompts' 37-51 tokens: prefill runs in several chunks
    eng = asyncio.run(Engine.load(smollm2_gguf, context_size=256, chunk=16))
    yield eng
    eng.close()


def run(coro):
    return asyncio.run(coro)


# Every prompt runs with --all; the default suite keeps one chat and one raw prompt (each prompt costs a minute or
# more on the 2-core CI box's lavapipe; the others repeat the same path with other tokens).
FAST_PROMPTS = ("chat_capital", "raw_fibonacci")


def slow_unless(names, fast):
    return [n if n in fast else pytest.param(n, marks=pytest.mark.slow) for n in names]


@pytest.mark.parametrize("name", slow_unless(sorted(PROMPTS), FAST_PROMPTS))
def test_greedy_tokens_equal_transformers(engine, name):
    p = PROMPTS[name]
    engine.steps_per_read = 4     # several steps in flight per readback
    res = run(engine.generate(p["prompt_ids"], max_tokens=32, stop_at_eos=False))
    assert res.tokens == p["greedy_ids"]
    assert res.stop_reason == "max_tokens"


@pytest.mark.parametrize("name", slow_unless(["chat_multiturn", "raw_capital", "chat_haiku"], ("raw_capital",)))
def test_logits_match_transformers(engine, name):
    p = PROMPTS[name]
    seq = p["prompt_ids"] + p["greedy_ids"]
    model = engine.model
    for rec in p["logits"]:
        pos = rec["position"]
        ids = seq[:pos + 1]
        for start in range(0, len(ids), model.chunk):
            model.prefill(ids[start:start + model.chunk], start, with_head=start + model.chunk >= len(ids))
        logits = np.frombuffer(run(engine.dev.read(model.logits, 0, 4 * model.vocab)), np.float32)
        np.testing.assert_allclose(logits[rec["top_ids"]], rec["top_values"], atol=LOGIT_TOL, err_msg=rec["label"])
        np.testing.assert_allclose(logits[FIXTURE["probe_ids"]], rec["probe_values"], atol=LOGIT_TOL)
        assert abs(logits.mean() - rec["mean"]) < LOGIT_TOL and abs(logits.std() - rec["std"]) < LOGIT_TOL


def test_text_prompt_stops_at_end_of_turn(engine):
    """Chat prompt from text: the tokenizer and template reproduce the fixture's ids, and generation stops at
    <|im_end|> (which is not part of the output)."""
    p = PROMPTS["chat_capital"]
    assert engine.tokenizer.encode(p["prompt"]) == p["prompt_ids"]
    pieces = []
    res = run(engine.generate(p["prompt"], max_tokens=32, on_token=lambda t, s: pieces.append(s)))
    eos = p["eos_position"]
    assert res.tokens == p["greedy_ids"][:eos]
    assert res.stop_reason == "eos"
    assert res.text == "".join(pieces) == engine.tokenizer.decode(p["greedy_ids"][:eos])
    assert res.text.strip() == "The capital of France is Paris."
    assert res.prefill_tok_s > 0 and res.decode_tok_s > 0


def test_chat_flag_applies_template(engine):
    p = PROMPTS["chat_capital"]
    assert engine.encode_prompt(p["messages"][0]["content"], chat=True) == p["prompt_ids"]


def test_bad_input(engine):
    with pytest.raises(InputError, match="empty"):
        run(engine.generate("   "))
    with pytest.raises(InputError, match="outside the vocabulary"):
        run(engine.generate([1, 2, 10 ** 6]))
    # the engine is still usable afterwards
    p = PROMPTS["raw_story"]
    assert run(engine.generate(p["prompt_ids"], max_tokens=4, stop_at_eos=False)).tokens == p["greedy_ids"][:4]


def test_generation_stops_at_context_end(smollm2_gguf):
    from cera_web.engine import Engine
    engine = run(Engine.load(smollm2_gguf, context_size=12, chunk=8))
    p = PROMPTS["raw_story"]
    res = run(engine.generate(p["prompt_ids"] * 2, max_tokens=100, stop_at_eos=False))   # 8 of 12 positions
    # positions 8..11 take the first 4 generated tokens; the 5th is sampled from position 11's logits
    assert res.stop_reason == "context" and len(res.tokens) == 5
    with pytest.raises(ContextOverflowError, match="12 tokens but the context holds 12"):
        run(engine.generate(p["prompt_ids"] * 3))
    engine.close()


def test_gpu_kernel_shapes_on_this_adapter(smollm2_gguf, monkeypatch):
    """The kernel shapes chosen for real GPUs (several threads per matmul row) give the same tokens; on CI they run
    on the CPU adapter, forced."""
    from cera_web.engine import Engine
    monkeypatch.setenv("CERA_WEB_KERNELS", "gpu")
    monkeypatch.setenv("CERA_WEB_INT8", "0")     # the float32 tiled prefill (tests/test_gemm8.py: the int8 one)
    engine = run(Engine.load(smollm2_gguf, context_size=64, chunk=8))
    assert not engine.dev.is_cpu
    p = PROMPTS["raw_fibonacci"]
    assert run(engine.generate(p["prompt_ids"], max_tokens=12, stop_at_eos=False)).tokens == p["greedy_ids"][:12]
    engine.close()


def test_upload_progress_counts_every_byte_once(smollm2_gguf):
    from cera_web.engine import Engine
    seen = []
    engine = run(Engine.load(smollm2_gguf, context_size=16, chunk=8, on_progress=lambda s, d, t: seen.append((s, d, t))))
    engine.close()
    ups = [(d, t) for s, d, t in seen if s == "upload"]
    assert ups and all(b[0] >= a[0] for a, b in zip(ups, ups[1:]))          # never goes back
    assert ups[-1][0] == ups[-1][1] and ups[0][1] == ups[-1][1]               # ends at 100% of a total fixed up front


@pytest.mark.parametrize("tiled", ["1", "0"], ids=["h128", "plain"])
def test_prefill_attention_heads_of_128_matches_numpy(tmp_path, monkeypatch, tiled):
    """A Qwen2-shaped model with heads of 128 (hidden 256, 2 query heads on 1 KV head, random Q8_0 weights) on the
    GPU, its prefill attention attention_tiled.wgsl in 32 rows (forced here on lavapipe; 2 key splits where the
    engine's rule gives them) or attention.wgsl: prompt logits over chunks of 24 tokens (later chunks read the
    earlier ones' keys; 48 query rows a chunk: one full 32-row block and a partial one) equal the numpy reference
    model's."""
    from cera_web import kernels
    from cera_web.tools.bench import synthetic_llama
    from cera_web.engine import Engine
    monkeypatch.setenv("CERA_WEB_ATTN_TILED", tiled)
    monkeypatch.setenv("CERA_WEB_CPU_KERNELS", "0")      # the CPU model as the float32 reference
    path = tmp_path / "h128.gguf"
    synthetic_llama(path, "qwen2.5-1.5b", "q8_0", layers=2, hidden=256, heads=2, kv_heads=1, ffn=512, vocab=300)
    gpu = run(Engine.load(path, context_size=128, chunk=24))
    cpu = run(Engine.load(path, device="cpu"))
    try:
        m = gpu.model
        rows = kernels.attention_tiled_rows(128, m.wg_memory, m.dev.is_cpu, m.dev.subgroup_size)
        assert rows == (32 if tiled == "1" else 0)
        ids = [(7 * i + 3) % 300 for i in range(70)]
        got = np.concatenate([run(m.chunk_logits(ids[s:s + 24], s)) for s in range(0, len(ids), 24)])
        want = cpu.model.ref.forward(ids, 0)
        assert np.abs(want).max() > 0.3 and np.abs(np.diff(want, axis=0)).max() > 0.1     # logits that move
        np.testing.assert_allclose(got, want, atol=2e-5 * np.abs(want).max(), rtol=0)
    finally:
        gpu.close()


@pytest.mark.parametrize("rows", ["32", "64"])
def test_split_tiled_prefill_attention_matches_transformers(smollm2_gguf, monkeypatch, rows):
    """The GPU's prefill attention (attention_tiled.wgsl in 32 or 64 rows, forced here on lavapipe) with
    its key tiles split over 4 workgroups a row block and merged by attention_combine.wgsl: prefill logits still
    within LOGIT_TOL of transformers, over several chunks (later chunks attend to earlier ones' keys)."""
    from cera_web import kernels
    from cera_web.engine import Engine
    monkeypatch.setenv("CERA_WEB_ATTN_TILED", rows)
    monkeypatch.setenv("CERA_WEB_PREFILL_ATTN_SPLIT", "4")
    eng = run(Engine.load(smollm2_gguf, context_size=256, chunk=32))
    try:
        model = eng.model
        parts = model._scratch_buffers.get("sums")
        assert parts is not None and parts.size >= 4 * 32 * 9 * 68 * 4
        assert kernels.attention_prefill_split(9, 3, 32) == 4
        p = PROMPTS["chat_multiturn"]
        seq = p["prompt_ids"] + p["greedy_ids"]
        rec = p["logits"][-1]
        ids = seq[:rec["position"] + 1]
        assert len(ids) > 2 * model.chunk
        for start in range(0, len(ids), model.chunk):
            model.prefill(ids[start:start + model.chunk], start, with_head=start + model.chunk >= len(ids))
        logits = np.frombuffer(run(eng.dev.read(model.logits, 0, 4 * model.vocab)), np.float32)
        np.testing.assert_allclose(logits[rec["top_ids"]], rec["top_values"], atol=LOGIT_TOL, err_msg=rec["label"])
        np.testing.assert_allclose(logits[FIXTURE["probe_ids"]], rec["probe_values"], atol=LOGIT_TOL)
    finally:
        eng.close()


@pytest.mark.parametrize("case", ["qwen2", "lfm2"])
def test_a_warm_up_leaves_no_trace_in_replies(case):
    """Engine.warm_up (run by the load on GPUs, so that the drivers' first-use work is not in the first reply's wait;
    software adapters skip it, so it is called here) changes no reply: greedy and seeded sampled tokens equal an
    engine's that never warmed up, for a prompt that begins with the warm-up's own tokens (the prompt cache must not
    take the rows it wrote) and for the same prompt again (cache reuse). LFM2: its conv layers' running state."""
    from cera_web.engine import Engine
    path = Path(__file__).parent / "fixtures" / "small" / f"{case}-f32.gguf"

    async def replies(warm):
        eng = await Engine.load(path, cpu_fallback=False, context_size=128)
        try:
            assert eng.model.passes == 0, "a software adapter warms nothing up at load"
            if warm:
                await eng.warm_up()
                assert eng.model.passes > 0
            t = eng.tokenizer.bos_id if eng.tokenizer.bos_id is not None else 0
            ids = [t, t, 5, 9, 11, 7]
            out = []
            for kw in (dict(), dict(), dict(temperature=0.8, seed=3)):
                out.append((await eng.generate(ids, max_tokens=8, ignore_eos=True, **kw)).tokens)
            return out
        finally:
            eng.close()
    cold, warm = run(replies(False)), run(replies(True))
    assert warm == cold
    assert len(cold[0]) == 8
