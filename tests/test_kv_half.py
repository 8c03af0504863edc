"""The KV cache in halves (Engine.load(kv_cache="f16"), the device's shader-f16 feature): keys and values are rounded
to float16 as they are cached (prefill: rope_store; decode: attention_decode, which also uses its own key and value
rounded), halving the cache's memory. Kernels: tests/test_kernels_gemma.py (the *half* tests).

Against two references:
- the numpy reference model with the same rounding (ReferenceModel kv_cache="f16"), on the small Qwen3, LFM2 and
  Gemma 3 fixtures: logits within HALF_VS_REF (both round the same values; a value within a hair of a tie between
  two halves may round the other way, and the GPU's float32 sums differ from numpy's in the last bits: which values
  flip depends on the machine's float32 arithmetic, e.g. Qwen3's logits are 2.3e-3 apart on an AVX-512 EPYC running
  lavapipe and numpy, 4e-5 for LFM2), and nearer it than the float32 reference on average (measured 6x for Qwen3,
  60-100x for LFM2 and Gemma 3), so the rounding is really there;
- transformers' float32 SmolLM2 (tests/fixtures/smollm2_reference.json): the rounding itself moves the logits, by
  at most 0.019 on these prompts (the f32 cache: 5e-5), within HALF_VS_F32; greedy tokens stay equal (32 a prompt).
"""
import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from cera_web.engine import Engine
from cera_web.errors import InputError, UnsupportedModelError

pytestmark = pytest.mark.gpu

SMALL = Path(__file__).parent / "fixtures" / "small"
FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "smollm2_reference.json").read_text())
HALF_VS_REF = 5e-3        # absolute, logits of magnitude up to ~27 (measured 2.3e-3 at most)
HALF_VS_F32 = 0.05        # absolute: measured 0.019 at most


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def dev():
    from cera_web.gpu.native import NativeDevice
    d = NativeDevice.create()
    if "shader-f16" not in d.features:
        pytest.skip("this adapter has no shader-f16")
    return d


@pytest.mark.parametrize("stem", ["qwen3-q8_0", "lfm2-q8_0", "gemma3-q8_0"])
def test_half_cache_equals_the_reference_with_the_same_rounding(dev, stem, monkeypatch):
    """Prompt logits in chunks of 4 (later chunks read the earlier chunks' cached halves), then 12 greedy decode steps
    through the decode plan: equal to the numpy model that rounds its cache the same way, and different from the
    float32 reference on average (so the rounding is really there). The CPU models are the float32 reference here
    (CERA_WEB_CPU_KERNELS=0: not the CPU path's 16-bit-activation kernels)."""
    monkeypatch.setenv("CERA_WEB_CPU_KERNELS", "0")
    path = SMALL / f"{stem}.gguf"
    gpu = run(Engine.load(path, device=dev, context_size=64, chunk=4, kv_cache="f16"))
    cpu = run(Engine.load(path, device="cpu", kv_cache="f16"))
    f32 = run(Engine.load(path, device="cpu"))
    ids = list(range(5, 16))
    got = np.concatenate([run(gpu.model.chunk_logits(ids[s:s + 4], s)) for s in range(0, len(ids), 4)])
    want = cpu.model.ref.forward(ids, 0)
    assert np.abs(got - want).max() < HALF_VS_REF, np.abs(got - want).max()
    assert np.abs(got - want).mean() < np.abs(got - f32.model.ref.forward(ids, 0)).mean() / 3
    a = run(gpu.generate(ids, max_tokens=12, stop_at_eos=False))
    b = run(cpu.generate(ids, max_tokens=12, stop_at_eos=False))
    assert a.tokens == b.tokens


@pytest.fixture(scope="module")
def smollm2_half(dev, smollm2_gguf):
    return run(Engine.load(smollm2_gguf, device=dev, context_size=256, chunk=64, kv_cache="f16"))   # dev is shared


@pytest.mark.slow   # 3.5 min on 2 cores; test_half_cache_equals_the_reference_with_the_same_rounding covers it
def test_smollm2_with_a_half_cache_against_transformers(smollm2_half):
    """Logits at the positions of two fixture prompts within HALF_VS_F32 of transformers' float32; the greedy tokens
    of a third equal."""
    eng, model = smollm2_half, smollm2_half.model
    for p in FIXTURE["prompts"][:2]:
        seq = p["prompt_ids"] + p["greedy_ids"]
        for rec in p["logits"]:
            ids = seq[:rec["position"] + 1]
            for s in range(0, len(ids), model.chunk):
                model.prefill(ids[s:s + model.chunk], s, with_head=s + model.chunk >= len(ids))
            logits = np.frombuffer(run(eng.dev.read(model.logits, 0, 4 * model.vocab)), np.float32)
            np.testing.assert_allclose(logits[rec["top_ids"]], rec["top_values"], atol=HALF_VS_F32)
            np.testing.assert_allclose(logits[FIXTURE["probe_ids"]], rec["probe_values"], atol=HALF_VS_F32)
    p = FIXTURE["prompts"][2]
    res = run(eng.generate(p["prompt_ids"], max_tokens=len(p["greedy_ids"]), stop_at_eos=False))
    assert res.tokens == p["greedy_ids"], p["name"]


def test_half_cache_takes_half_the_memory(dev):
    """The KV cache's bytes, as the model reports them and as the fit report counts them before loading."""
    from cera_web.gguf import open_gguf
    from cera_web.models.memory import fit_report
    path = SMALL / "qwen3-q8_0.gguf"
    half, full = (run(Engine.load(path, device=dev, context_size=512, kv_cache=kv)) for kv in ("f16", "f32"))
    assert half.model.memory()["kv_cache"] * 2 == full.model.memory()["kv_cache"] > 0
    g = open_gguf(path)
    assert fit_report(g, dev.limits, 512, kv_cache="f16")["kv_cache"] == half.model.memory()["kv_cache"]


def test_bad_kv_cache_settings(dev, smollm2_gguf, monkeypatch):
    with pytest.raises(InputError, match="kv_cache must be 'f32' or 'f16', got 'bf16'"):
        run(Engine.load(smollm2_gguf, device=dev, kv_cache="bf16"))
    monkeypatch.setattr(dev, "features", dev.features - {"shader-f16"})
    with pytest.raises(UnsupportedModelError, match="kv_cache='f16' needs the GPU's shader-f16 feature"):
        run(Engine.load(smollm2_gguf, device=dev, kv_cache="f16"))
