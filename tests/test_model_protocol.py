"""The engine's two seams, checked: the Model protocol (models/base.py) that the GPU and the CPU model implement, the
one decode loop's schedules (engine._Batches, engine._Overlapped: how steps are submitted, never what they compute),
and the one load path (loading.plan_load: the header parsed, the spec built, the fit checked and the device made
once a load)."""
import asyncio
import inspect
import json
import sys
import typing
from pathlib import Path

import pytest

from cera_web import gguf as gguf_mod
from cera_web import gpu as gpu_mod
from cera_web.engine import Engine
from cera_web.models import memory, spec
from cera_web.models.base import Model, Sampler

SMALL = Path(__file__).parent / "fixtures" / "small"
LFM2 = SMALL / "lfm2-q8_0.gguf"          # conv layers: a running state, taken back by keep_state
INFO = json.loads((SMALL / "reference.json").read_text())


def run(coro):
    return asyncio.run(coro)


def members(proto):
    """{name: the protocol's function, or None for an attribute} of a typing.Protocol."""
    out = {name: None for name in typing.get_type_hints(proto)}
    out.update({name: f for name, f in vars(proto).items() if inspect.isfunction(f) and not name.startswith("_")})
    return out


def assert_implements(obj, proto):
    for name, want in members(proto).items():
        assert hasattr(obj, name), f"{type(obj).__name__} lacks {proto.__name__}.{name}"
        if want is None:
            continue
        got = getattr(obj, name)
        assert inspect.iscoroutinefunction(got) == inspect.iscoroutinefunction(want), \
            f"{type(obj).__name__}.{name}: async differs from {proto.__name__}.{name}"
        assert list(inspect.signature(got).parameters) == list(inspect.signature(want).parameters)[1:], \
            f"{type(obj).__name__}.{name}{inspect.signature(got)} differs from {proto.__name__}.{name}"


@pytest.fixture(scope="module")
def cpu_engine():
    eng = run(Engine.load(LFM2, device="cpu", context_size=64))
    yield eng
    eng.close()


def test_the_protocol_is_what_the_engine_uses():
    """Every member of Model that the decode loop relies on is declared (a missing one here and a present one in
    both models would let a third model pass the check and fail in the engine)."""
    names = set(members(Model))
    assert {"prefill", "decode", "read_log", "encode_forward", "send_forward", "encode_sample", "encode_read",
            "send", "discard", "collect", "keep_state", "make_sampler", "runs_ahead", "max_steps_per_read",
            "rewindable", "passes", "sampler_plan"} <= names
    assert {"set_params", "set_history", "set_mask", "read_logprobs", "parse_logprobs", "plan"} <= set(members(Sampler))


def test_the_cpu_model_implements_the_protocol(cpu_engine):
    assert_implements(cpu_engine.model, Model)
    assert_implements(cpu_engine.model.make_sampler(), Sampler)
    assert cpu_engine.model.runs_ahead is False and cpu_engine.cpu


@pytest.mark.gpu
def test_the_gpu_model_implements_the_protocol():
    eng = run(Engine.load(LFM2, context_size=32, chunk=4, cpu_fallback=False))
    try:
        assert_implements(eng.model, Model)
        assert_implements(eng.model.make_sampler(), Sampler)
        assert eng.model.runs_ahead is True and not eng.cpu
    finally:
        eng.close()


# -- the decode loop's schedules ---------------------------------------------------------------------------------------

def _outcome(res):
    return res.tokens, res.text, res.stop_reason, res.stop_sequence, res.logprobs


SCHEDULES = {"one batch a read": (False, False), "batches in flight / the draw after the next pass": (True, True)}


@pytest.mark.parametrize("grammar", [None, "root ::= [a-z ]+"], ids=["free", "grammar"])
def test_every_schedule_gives_the_same_tokens_and_keeps_what_it_can(cpu_engine, grammar):
    """The CPU model computes each step when it is submitted, so it runs every schedule: one batch a read (its own),
    two batches in flight and, under a grammar, the draw after the next step's forward pass (a GPU's). Tokens,
    text, stop and logprobs are the same whatever the schedule (greedy and seeded, stops at max_tokens and at a
    stop token inside a batch). What the cache keeps after the stop is the bookkeeping's: the CPU model keeps every
    position's conv input (rewindable), so a next turn reuses the prompt and the reply up to the stop token whether
    or not steps ran past it (the GPU's conv-state snapshots: tests/test_models.py)."""
    eng, model = cpu_engine, cpu_engine.model
    ids = INFO["files"]["lfm2-q8_0"]["text_case"]["prompt_ids"]
    try:
        eng.steps_per_read = 3          # batches of 3: the stop token (the 5th) is the first of the second batch
        for kw in (dict(), dict(temperature=0.9, seed=5, logprobs=True, top_logprobs=3)):
            kw.update(max_tokens=9, ignore_eos=True)
            want = None
            for name, (overlap, ahead) in SCHEDULES.items():
                eng.overlap, model.runs_ahead = overlap, ahead
                full = run(eng.generate(ids, grammar=grammar, **kw))
                want = want or full
                assert _outcome(full) == _outcome(want), (name, kw)
                assert full.stop_reason == "max_tokens" and len(full.tokens) == 9
                # the stop: a token new to the reply, first or second of the second batch (steps ran past it)
                k = next(i for i in (4, 5) if full.tokens[i] not in full.tokens[:i])
                cut = full.tokens[k]
                stopped = run(eng.generate(ids, grammar=grammar, stop_token_ids=[cut], **kw))
                assert stopped.tokens == full.tokens[:k] and stopped.stop_reason == "stop" \
                    and stopped.stop_sequence == cut
                if kw.get("logprobs"):
                    assert stopped.logprobs == full.logprobs[:k]
                turn = ids + full.tokens[:k + 1]      # the next turn: the prompt, the reply and its stop token
                again = run(eng.generate(turn, max_tokens=1))
                assert again.cached_tokens == len(ids) + k, name
    finally:
        eng.overlap, eng.steps_per_read = True, None
        del model.runs_ahead


# -- the one load path ------------------------------------------------------------------------------------------------

@pytest.fixture
def count_calls(monkeypatch):
    """count_calls(f): replace every binding of function f in the loaded cera_web modules by a counting wrapper;
    returns the list of calls (one entry each)."""
    def patch(f):
        calls = []

        def counted(*a, **kw):
            calls.append(a)
            return f(*a, **kw)
        for name, mod in list(sys.modules.items()):
            if name == "cera_web" or name.startswith("cera_web."):
                for attr, value in list(vars(mod).items()):
                    if value is f:
                        monkeypatch.setattr(mod, attr, counted)
        return calls
    return patch


def _count_load(count_calls):
    return {"parse": count_calls(gguf_mod.parse_gguf), "spec": count_calls(spec.model_spec),
            "fit": count_calls(memory.fit_report), "device": count_calls(gpu_mod.get_device)}


def test_a_cpu_load_reads_the_header_and_builds_the_spec_once(count_calls, smollm2_gguf):
    n = _count_load(count_calls)
    eng = run(Engine.load(smollm2_gguf, device="cpu", context_size=32))
    try:
        assert {k: len(v) for k, v in n.items()} == {"parse": 1, "spec": 1, "fit": 0, "device": 0}
        assert eng.plan.spec is eng.model.spec and eng.plan.gguf is eng.gguf and eng.plan.fit is None
    finally:
        eng.close()


@pytest.mark.gpu
def test_a_gpu_load_reads_checks_and_makes_each_thing_once(count_calls):
    n = _count_load(count_calls)
    eng = run(Engine.load(LFM2, context_size=32, chunk=4, cpu_fallback=False))
    try:
        assert {k: len(v) for k, v in n.items()} == {"parse": 1, "spec": 1, "fit": 1, "device": 1}
        assert eng.plan.spec is eng.model.spec and eng.plan.fit["kv_cache"] == eng.model.memory()["kv_cache"]
    finally:
        eng.close()


@pytest.mark.gpu
def test_a_page_load_uses_the_header_checked_from_the_download(count_calls):
    """The page's order: prepare() makes the device, check_header() reads the download's first bytes, load()
    loads the whole file: one parse, one spec, one fit check and one device for all of it. A header checked for
    another file of the same size is not used."""
    from cera_web import webapp
    from cera_web.source import BytesSource
    data = LFM2.read_bytes()
    posted = []
    webapp.init(posted.append)
    n = _count_load(count_calls)
    try:
        assert run(webapp.prepare("", "webgpu"))
        assert "ok" in json.loads(webapp.check_header(data, len(data), LFM2.name))
        assert run(webapp.load_source(BytesSource(data, LFM2.name)))
        assert {k: len(v) for k, v in n.items()} == {"parse": 1, "spec": 1, "fit": 1, "device": 1}
        assert json.loads(posted[-1])["type"] == "ready"
        other = bytearray(data)
        other[100] ^= 1         # another file of the same size (a byte of the header's metadata changed)
        assert run(webapp.prepare("", "webgpu"))
        assert "ok" in json.loads(webapp.check_header(data, len(data), LFM2.name))
        run(webapp.load_source(BytesSource(bytes(other), LFM2.name)))
        assert len(n["parse"]) == 3          # the second load read its own header
    finally:        # leave the glue as other tests expect it: no model loaded
        state = getattr(webapp, "_state", None)
        if state is not None:
            if state.engine is not None:
                state.engine.close()
            state.engine = state.chat = None
        else:           # the glue's module-level state
            if webapp._engine is not None:
                webapp._engine.close()
            webapp._engine = webapp._chat = None
