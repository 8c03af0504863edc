"""The CPU fallback: the numpy reference model behind the engine's interface, used when no GPU adapter exists."""
import asyncio
import json
from pathlib import Path

import pytest

from cera_web.errors import GPUUnavailableError

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "smollm2_reference.json").read_text())
PROMPTS = {p["name"]: p for p in FIXTURE["prompts"]}


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def cpu_engine(smollm2_gguf):
    from cera_web.engine import Engine
    eng = run(Engine.load(smollm2_gguf, context_size=128, device="cpu"))
    yield eng
    eng.close()


@pytest.mark.parametrize("name", ["chat_capital", "raw_fibonacci"])
def test_cpu_greedy_equals_transformers(cpu_engine, name):
    p = PROMPTS[name]
    assert cpu_engine.backend == "CPU (numpy reference)"
    res = run(cpu_engine.generate(p["prompt_ids"], max_tokens=32, stop_at_eos=False))
    assert res.tokens == p["greedy_ids"]


def test_cpu_sampling_is_seeded_and_matches_the_gpu_sampler(cpu_engine, smollm2_gguf):
    from cera_web.engine import Engine
    settings = dict(max_tokens=8, temperature=0.9, top_k=40, top_p=0.95, seed=1234, ignore_eos=True)
    prompt = PROMPTS["raw_story"]["prompt_ids"]
    a = run(cpu_engine.generate(prompt, **settings)).tokens
    assert run(cpu_engine.generate(prompt, **settings)).tokens == a
    assert run(cpu_engine.generate(prompt, **{**settings, "seed": 99})).tokens != a
    gpu = run(Engine.load(smollm2_gguf, context_size=64, chunk=8, cpu_fallback=False))
    try:
        assert run(gpu.generate(prompt, **settings)).tokens == a     # the numpy twin of sample.wgsl
    finally:
        gpu.close()


def test_no_adapter_falls_back_to_the_cpu(smollm2_gguf, monkeypatch, capsys):
    from cera_web import engine as engine_mod
    from cera_web import gpu

    async def no_gpu(**kwargs):
        raise GPUUnavailableError("no WebGPU adapter found (test)")
    monkeypatch.setattr(gpu, "get_device", no_gpu)     # the one place a load makes its device (loading.open_model)
    eng = run(engine_mod.Engine.load(smollm2_gguf, context_size=32))
    assert eng.backend == "CPU (numpy reference)"
    assert "running on the CPU instead" in capsys.readouterr().err
    p = PROMPTS["raw_capital"]
    assert run(eng.generate(p["prompt_ids"], max_tokens=4, stop_at_eos=False)).tokens == p["greedy_ids"][:4]
    with pytest.raises(GPUUnavailableError, match="no WebGPU adapter"):
        run(engine_mod.Engine.load(smollm2_gguf, context_size=32, cpu_fallback=False))


def test_cpu_chat_session_reuses_the_cache(cpu_engine):
    from cera_web.engine import ChatSession
    chat = ChatSession(cpu_engine)
    first = run(chat.send("What is the capital of France?", temperature=0, max_tokens=8))
    assert first.text.strip().startswith("The capital of France is Paris")
    second = run(chat.send("And of Italy?", temperature=0, max_tokens=8))
    assert second.cached_tokens > len(first.prompt_tokens)


def test_cpu_prompt_progress_chunks_and_a_stop_between_them(cpu_engine):
    """On the CPU a prompt is processed 16 tokens a pass (CPUDevice.prefill_chunk); on_prefill hears (0, n) and then
    the tokens done after each pass; a cancel made while the prompt is processed ends the run after the pass in
    flight (stop_reason "cancelled", no token). Then the engine generates normally again."""
    prompt = (PROMPTS["raw_story"]["prompt_ids"] * 20)[:90]     # the engine's context is 128
    n = len(prompt)
    assert cpu_engine.model.chunk == 16 and n > 40
    seen = []
    cpu_engine.on_prefill = lambda done, total: seen.append((done, total))
    try:
        res = run(cpu_engine.generate(prompt, max_tokens=2, reuse_cache=False))
        assert seen == [(0, n)] + [(d, n) for d in range(16, n, 16)] and len(res.tokens) == 2

        seen.clear()

        def stop_at(done, total):
            seen.append(done)
            if done >= 32:
                cpu_engine.cancel()
        cpu_engine.on_prefill = stop_at
        res = run(cpu_engine.generate(prompt, max_tokens=2, reuse_cache=False))
        assert res.stop_reason == "cancelled" and res.tokens == [] and seen == [0, 16, 32]
    finally:
        cpu_engine.on_prefill = None
    assert len(run(cpu_engine.generate(prompt[:20], max_tokens=2)).tokens) == 2


def test_continue_reply_extends_a_cut_reply_as_one_longer_reply_would(cpu_engine):
    """A reply cut by max_tokens and then continued equals the reply generated in one go with the sum of the two
    max_tokens (greedy): the continuation sees the conversation, the generation prompt and the reply so far."""
    from cera_web.engine import ChatSession
    from cera_web.errors import InputError
    question = "Name three colours of the rainbow."
    whole = ChatSession(cpu_engine)
    want = run(whole.send(question, max_tokens=10, temperature=0, ignore_eos=True))
    chat = ChatSession(cpu_engine)
    first = run(chat.send(question, max_tokens=4, temperature=0, ignore_eos=True))
    assert first.stop_reason == "max_tokens"
    more = run(chat.continue_reply(max_tokens=6, temperature=0, ignore_eos=True))
    assert first.tokens + more.tokens == want.tokens
    assert chat.messages[-1] == {"role": "assistant", "content": want.text}
    assert more.cached_tokens == len(first.prompt_tokens) + len(first.tokens) - 1   # the cache held all but one
    with pytest.raises(InputError, match="no reply to continue"):
        run(ChatSession(cpu_engine).continue_reply())
