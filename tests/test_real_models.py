"""The real checkpoints (optional assets: `python -m cera_web.tools.assets --models`; tests/run.py fetches them) on the GPU
(native wgpu; lavapipe on CI) against tests/fixtures/real_reference.json, which tests/fixtures/make_real_reference.py
made with transformers loading the same GGUF in float32 (it dequantizes the Q4_K/Q5_0/Q6_K/Q8_0 blocks exactly).

- prompt ids: our tokenizer (and for Qwen's chat prompts our template sandbox rendering the GGUF's template) gives
  transformers' ids for every raw and chat prompt;
- last-position logits of the two raw prompts and the shorter chat prompt (the other chat prompt with --all), each
  prefilled from an empty cache: the 64 largest and 64 probe values within LOGIT_TOL, the same argmax, and the
  engine's first generated token;
- greedy generation from the shorter chat prompt (and a raw one with --all): N_GREEDY tokens equal to transformers',
  then the logits of step N_GREEDY (the last token drawn, run at its position over the cache the decode steps wrote)
  as the last-position ones, whose argmax is the next greedy token. No compared step may be a near-tie (a top-1 /
  top-2 margin in the reference below NEAR_TIE, where float32 summation order may pick the other token).

Cost on lavapipe (the 2-core CI box): software adapters run each prefill product as a matrix-vector pass a token
(docs/DESIGN.md, "Software adapters"), so a prompt token costs about what a decode step does: 2-3 s for
Qwen2.5-Coder-0.5B on a quiet box. A step reads ~500M weights: 24 layers of Q5_0 / Q6_K products (about 85% of a
step, ~10 ns a weight there, a third of the rate of the aligned Q8_0 LM head) and that 151,936 x 896 head. So the
tests share work as a chat's next turn does: one engine per model for the module (the tests run grouped by model),
the logits test of the greedy prompt runs last, and the greedy test then generates with the engine's default
reuse_cache, prefilling only the prompt's last token again (run alone, it prefills the whole prompt; the tokens
compared are the same either way).

The engine keeps float32 activations like the reference; the logits differ by float32 summation order only: observed
max |error| 7e-5 on lavapipe (Gemma 3 270M, logits up to 19; Qwen2.5-Coder-0.5B, up to 23); LOGIT_TOL = 2e-3 leaves
room for other GPUs' arithmetic. Near-ties in the reference's 16 greedy steps: Gemma's "capital" at steps 11 and 15
(margins below NEAR_TIE), none in the other compared prompts.
"""
import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from cera_web.tools import assets

pytestmark = pytest.mark.gpu

REF = json.loads((Path(__file__).parent / "fixtures" / "real_reference.json").read_text(encoding="utf-8"))
LOGIT_TOL = 2e-3
NEAR_TIE = 0.02
N_GREEDY = 8                            # tokens compared; the reference's logits of step 8 are then checked too
MODELS = sorted(REF["models"])          # gemma3-270m, qwen2.5-coder-0.5b
# Prompts by role: the raw prompts by name; "chat" the model's shorter chat prompt, "chat2" the other (the template's
# other branch: a system message given or not), whose logits repeat the first's evidence (the same prefill on the same
# file; its ids are checked in the default run) and run with --all. The greedy prompt's logits test comes last, so
# that its prefill is still in the engine's cache when test_greedy_tokens runs.
GREEDY = "chat"
LOGIT_PROMPTS = ["capital", "code", pytest.param("chat2", marks=pytest.mark.slow), GREEDY]
# a raw prompt's greedy run repeats that evidence (the same decode path on the same file) and runs with --all, second
GREEDY_PROMPTS = [GREEDY, pytest.param("capital", marks=pytest.mark.slow)]


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module", params=MODELS)
def name(request):
    """The model of a test; module-scoped, so pytest runs each model's tests together (one load each)."""
    if not assets.is_installed(request.param):
        pytest.skip(f"{request.param} is not fetched: python -m cera_web.tools.assets --models (tests/run.py does)")
    return request.param


@pytest.fixture(scope="module")
def engine(name):
    """The model's engine, loaded once for the module (the previous model's is closed first by pytest's teardown of
    the fixture's last instance: one real model in memory at a time)."""
    from cera_web.engine import Engine
    from cera_web.gpu.native import NativeDevice
    eng = run(Engine.load(assets.asset_path(name), device=NativeDevice.create(), context_size=256, chunk=64))
    yield eng
    eng.close()


def prompt(name, which):
    """The reference's prompt of a role (see LOGIT_PROMPTS)."""
    prompts = REF["models"][name]["prompts"]
    if which in ("chat", "chat2"):
        chats = sorted((p for p in prompts if p["kind"] == "chat"), key=lambda p: len(p["prompt_ids"]))
        return chats[which == "chat2"]
    return next(p for p in prompts if p["name"] == which)


def check_logits(engine, name, p, step):
    """The logits the engine's last pass left (its last position) against the reference's of greedy step ``step``."""
    model = engine.model
    logits = np.frombuffer(run(model.dev.read(model.logits, 0, 4 * model.vocab)), np.float32)
    want = next(r for r in p["logits"] if r["label"] == f"step_{step}")
    top, probe = np.array(want["top_ids"]), np.array(REF["models"][name]["probe_ids"])
    err = max(np.abs(logits[top] - want["top_values"]).max(), np.abs(logits[probe] - want["probe_values"]).max())
    assert err < LOGIT_TOL, f"{name} {p['name']} step {step}: max |logit error| {err:.2e}"
    assert int(np.argmax(logits)) == top[0] == p["greedy_ids"][step]
    assert abs(float(logits.mean()) - want["mean"]) < LOGIT_TOL and abs(float(logits.std()) - want["std"]) < 1e-3


def test_prompt_ids(engine, name):
    ref = REF["models"][name]
    assert engine.model.vocab == ref["vocab_size"]
    for p in ref["prompts"]:
        if p["kind"] == "chat" and engine.tokenizer.chat_template:      # Qwen; Gemma 270M (base) has none
            assert engine.encode_chat(p["messages"]) == p["prompt_ids"], p["name"]
        assert engine.tokenizer.encode(p["prompt"], add_special=p["kind"] == "raw") == p["prompt_ids"], p["name"]


@pytest.mark.parametrize("which", LOGIT_PROMPTS)
def test_last_position_logits(engine, name, which):
    p = prompt(name, which)
    # the whole prompt prefilled (nothing reused from the test before); the head's argmax is the first token
    res = run(engine.generate(p["prompt_ids"], max_tokens=1, stop_at_eos=False, reuse_cache=False))
    assert res.cached_tokens == 0 and res.tokens == p["greedy_ids"][:1]
    check_logits(engine, name, p, 0)


def first_near_tie(p, n):
    """Greedy steps to compare: up to (excluding) the first step of the reference whose margin is below NEAR_TIE."""
    return next((k for k, m in enumerate(p["margins"][:n]) if m < NEAR_TIE), n)


@pytest.mark.parametrize("which", GREEDY_PROMPTS)
def test_greedy_tokens(engine, name, which):
    p = prompt(name, which)
    n = first_near_tie(p, N_GREEDY + 1)
    assert n > N_GREEDY, f"{name} {p['name']}: a near-tie at step {n}; pick another prompt"
    # reuse_cache (the default): after the logits test only the prompt's last token is prefilled again
    res = run(engine.generate(p["prompt_ids"], max_tokens=N_GREEDY, stop_at_eos=False))
    assert res.tokens == p["greedy_ids"][:N_GREEDY]
    # step N_GREEDY: the last token drawn, at its position, attends over the cache rows the decode steps wrote
    engine.model.prefill(res.tokens[-1:], len(p["prompt_ids"]) + N_GREEDY - 1, with_head=True)
    check_logits(engine, name, p, N_GREEDY)
