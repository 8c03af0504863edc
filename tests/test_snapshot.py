"""The prompt cache that survives (cera_web.snapshot): prefix reuse by default, snapshots of the state of a prefix
restored in another engine, bad snapshots discarded, ChatSession.save/load and the CLI's --prompt-cache.

Exactness: a restored state is the same bytes as the state the prefill made, so the logits (here: logprobs of every
generated token, and the greedy tokens) after a restore equal those after recomputing the prefix the same way, with
no tolerance; checked on a Qwen2 (Llama family), a Qwen3, an LFM2 (conv layers: a running state) and a Gemma 3
fixture (a prefix longer than its 8-token sliding window), f32 and f16 caches, on the GPU (lavapipe) and the CPU.
"""
import asyncio
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from cera_web import snapshot
from cera_web.engine import Engine
from cera_web.errors import SnapshotError
from cera_web.session import ChatSession, SnapshotWarning

pytestmark = pytest.mark.gpu

SMALL = Path(__file__).parent / "fixtures" / "small"
PREFIX = [(7 * i + 3) % 290 + 5 for i in range(21)]      # longer than Gemma's window (8), several chunks of 8
TAIL = [11, 12, 13]
SETTINGS = dict(max_tokens=6, ignore_eos=True, logprobs=True, top_logprobs=3)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def dev():
    from cera_web.gpu.native import NativeDevice
    return NativeDevice.create()


def load(dev, stem, **kw):
    kw = {"context_size": 64, "chunk": 8, **kw}
    return run(Engine.load(SMALL / f"{stem}.gguf", device=dev if dev is not None else "cpu", **kw))


def same_run(a, b):
    """Greedy tokens and the logprobs of every token (from the logits) equal, exactly."""
    assert a.tokens == b.tokens
    assert a.logprobs == b.logprobs


CASES = [("qwen2-q8_0", "f32", True), ("qwen3-q8_0", "f32", True), ("lfm2-q8_0", "f32", True),
         ("gemma3-q8_0", "f32", True), ("lfm2-q8_0", "f16", True), ("gemma3-q8_0", "f16", True),
         ("lfm2-q8_0", "f32", False), ("gemma3-q8_0", "f32", False)]


@pytest.mark.parametrize("stem,kv,gpu", CASES, ids=[f"{s}-{k}-{'gpu' if g else 'cpu'}" for s, k, g in CASES])
def test_restored_state_gives_the_logits_of_the_prefill_that_made_it(dev, stem, kv, gpu):
    if gpu and kv == "f16" and "shader-f16" not in dev.features:
        pytest.skip("this adapter has no shader-f16")
    a = load(dev if gpu else None, stem, kv_cache=kv)
    run(a.generate(PREFIX, max_tokens=4, ignore_eos=True))
    data = run(a.save_state(PREFIX))
    held = snapshot.read_header(data)["tokens"]
    # every prefix is restorable on a rewindable model; with conv layers on the GPU, the prompt but its last token
    assert held == (PREFIX[:-1] if gpu and stem.startswith("lfm2") else PREFIX)
    want = run(a.generate(PREFIX + TAIL, **SETTINGS))      # resumes at the same point from its own cache
    assert want.cached_tokens == len(held)

    b = load(dev if gpu else None, stem, kv_cache=kv)
    assert b.restore_state(data) == held
    assert run(b.save_state()) == data                      # the same bytes back
    got = run(b.generate(PREFIX + TAIL, **SETTINGS))
    assert got.cached_tokens == len(held)
    same_run(got, want)
    # and the same tokens as recomputing everything
    assert run(b.generate(PREFIX + TAIL, reuse_cache=False, **SETTINGS)).tokens == got.tokens


def test_prefix_reuse_is_the_default_everywhere(dev):
    """generate, the OpenAI-style APIs (usage.prompt_tokens_details.cached_tokens) and n > 1 choices reuse the
    longest prefix held; reuse_cache=False recomputes."""
    e = load(dev, "lfm2-q8_0")          # conv layers: resumed at the mark for a repeated prompt
    first = run(e.generate(PREFIX, max_tokens=3))
    assert first.cached_tokens == 0
    again = run(e.generate(PREFIX, max_tokens=3))
    assert again.cached_tokens == len(PREFIX) - 1 and again.tokens == first.tokens
    assert run(e.generate(PREFIX, max_tokens=3, reuse_cache=False)).cached_tokens == 0
    reply = run(e.completions.create(prompt=PREFIX + TAIL, max_tokens=3, n=2, temperature=0.8, seed=5))
    assert reply["usage"]["prompt_tokens_details"]["cached_tokens"] == len(PREFIX) - 1
    c = load(dev, "qwen3-q8_0", context_size=128)
    msgs = [{"role": "system", "content": "be brief " * 3}, {"role": "user", "content": "hi"}]
    r1 = run(c.chat.completions.create(messages=msgs, max_tokens=2))
    msgs[-1]["content"] = "hello there"
    r2 = run(c.chat.completions.create(messages=msgs, max_tokens=2))
    assert r1["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    shared = len(c.encode_chat(msgs[:1] + [{"role": "user", "content": ""}]))
    assert 12 < r2["usage"]["prompt_tokens_details"]["cached_tokens"] <= shared


def bad_snapshots(e, data):
    """(what, bytes) of each kind of snapshot that must be discarded."""
    h = snapshot.read_header(data)
    payload = h["offset"]
    flip = bytearray(data)
    flip[payload + (len(data) - payload) // 2] ^= 0x10
    head = bytearray(data)
    head[payload - 3] ^= 0x01                      # inside the JSON header's last field
    version = bytearray(data)
    version[7] = 9
    yield "truncated", data[:-5]
    yield "truncated header", data[:40]
    yield "flipped payload byte", bytes(flip)
    yield "flipped header byte", bytes(head)
    yield "other layout version", bytes(version)
    yield "not a snapshot", b"GGUF" + bytes(60)
    yield "padded", data + b"\0"


def test_bad_snapshots_are_discarded_and_change_nothing(dev, tmp_path):
    e = load(dev, "qwen3-q8_0")
    run(e.generate(PREFIX, max_tokens=2))
    data = run(e.save_state())
    fresh = load(dev, "qwen3-q8_0")
    run(fresh.generate(PREFIX + TAIL, **SETTINGS))
    clean = run(fresh.generate(PREFIX + TAIL, **SETTINGS))     # all but the last token from its cache
    for what, bad in bad_snapshots(e, data):
        with pytest.raises(SnapshotError):
            fresh.restore_state(bad)
        got = run(fresh.generate(PREFIX + TAIL, **SETTINGS))
        assert got.cached_tokens == len(PREFIX) + len(TAIL) - 1, what     # its own cache, untouched
        same_run(got, clean)
    for other, msg in ((load(dev, "qwen2-q8_0"), "another model"),
                       (load(dev, "qwen3-q8_0", context_size=96), "context of 64"),
                       (load(None, "qwen3-q8_0", kv_cache="f16"), "f32 KV cache")):
        with pytest.raises(SnapshotError, match=msg):
            other.restore_state(data)
        assert run(other.generate(PREFIX, max_tokens=1)).cached_tokens == 0


def test_chat_session_saves_and_loads_in_another_engine(dev, tmp_path):
    a = load(dev, "qwen3-q8_0", context_size=128)
    chat = ChatSession(a, system="be terse " * 2, params={"temperature": 0})
    run(chat.send("first q", max_tokens=4))
    path = tmp_path / "chat.snap"
    run(chat.save(path))
    went_on = run(chat.send("second", max_tokens=5))        # continued in the first engine

    b = load(dev, "qwen3-q8_0", context_size=128)
    resumed = ChatSession.load(b, path, params={"temperature": 0})
    assert resumed.messages == chat.messages[:3]
    r = run(resumed.send("second", max_tokens=5))
    assert r.text == chat.messages[-1]["content"]
    assert r.cached_tokens == went_on.cached_tokens > len(r.prompt_tokens) // 2    # only the new turn was prefilled

    other = load(dev, "qwen2-q8_0", context_size=128)        # another model: the conversation, not the state
    with pytest.warns(SnapshotWarning, match="another model"):
        moved = ChatSession.load(other, path.read_bytes())
    assert moved.messages == chat.messages[:3]
    assert run(moved.send("second", max_tokens=2)).cached_tokens == 0
    with pytest.raises(SnapshotError, match="no conversation"):
        ChatSession.load(b, run(a.save_state()))


def cli(*args):
    out = subprocess.run([sys.executable, "-m", "cera_web", "generate", "--json", *args], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), out.stderr


def test_cli_prompt_cache_gives_the_same_tokens(tmp_path):
    model = str(SMALL / "lfm2-q8_0.gguf")
    cache = tmp_path / "prompt.cache"
    common = ["--model", model, "--system", "answer in one word " * 5, "--max-tokens", "6", "--ignore-eos"]
    plain, _ = cli(*common, "--prompt", "what is it")
    first, _ = cli(*common, "--prompt", "what is it", "--prompt-cache", str(cache))
    assert first["cached_tokens"] == 0 and cache.exists()
    second, err = cli(*common, "--prompt", "what is it", "--prompt-cache", str(cache))
    assert second["cached_tokens"] == len(second["prompt_tokens"]) - 1 and not err
    assert plain["tokens"] == first["tokens"] == second["tokens"]
    cache.write_bytes(cache.read_bytes()[:-7])
    cut, err = cli(*common, "--prompt", "what is it", "--prompt-cache", str(cache))
    assert cut["cached_tokens"] == 0 and cut["tokens"] == plain["tokens"]
    assert "prompt cache" in err and "truncated" in err and len(err.strip().splitlines()) == 1
    # with conv layers a shorter shared prefix cannot be resumed; on attention-only models it is
    assert cli(*common, "--prompt", "and this", "--prompt-cache", str(cache))[0]["cached_tokens"] == 0
    common[1] = str(SMALL / "qwen3-q8_0.gguf")
    other = tmp_path / "other.cache"
    cli(*common, "--prompt", "what is it", "--prompt-cache", str(other))
    part, _ = cli(*common, "--prompt", "and this", "--prompt-cache", str(other))
    assert 30 < part["cached_tokens"] < len(part["prompt_tokens"]) - 2
    cache.write_bytes(other.read_bytes())       # made with another model: not used, said so
    _, err = cli(*common[:1], model, *common[2:], "--prompt", "what is it", "--prompt-cache", str(cache))
    assert "another model" in err


@pytest.mark.parametrize("stem", ["qwen3-q8_0", "lfm2-q8_0"])
def test_prompt_cache_benchmark_restores_what_it_saved(dev, stem):
    """bench --prompt-cache (tools/bench.prompt_cache): its restored runs hold the whole shared prompt (with conv
    layers too: a one-token generation leaves the state at the prompt's end) and give the recomputed run's token (it
    raises otherwise)."""
    from cera_web.tools import bench
    out = run(bench.prompt_cache(load(dev, stem), 30, new_tokens=4, repeats=1))
    assert out["cached_tokens"] == 30
    layout = load(dev, stem).model.state_sizes(out["cached_tokens"])
    assert out["snapshot_bytes"] > sum(layout) and out["speedup"] > 0
