"""Constrained decoding with the real model: SmolLM2's outputs under JSON schemas and a grammar, on the GPU path
(sample.wgsl applies the grammar's mask before penalties and temperature) against the CPU reference engine (numpy
forward pass, numpy sampler on the masked logits: cera_web.sampling.sample_numpy), token for token, and validated
with the `jsonschema` package. lavapipe is slow: replies are kept short by the schemas (enums, maxLength).
"""
import asyncio
import json

import jsonschema
import pytest

from cera_web.errors import InputError
from cera_web.grammar import GrammarError, Recogniser
from cera_web.json_schema import constraint

pytestmark = pytest.mark.gpu

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
PLACE = {"type": "object",
         "properties": {"city": {"type": "string", "maxLength": 16},
                        "country": {"enum": ["France", "Italy", "Spain", "Germany"]},
                        "capital": {"type": "boolean"}},
         "required": ["city", "country"]}
SHAPES = {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                           "required": ["x", "y"]}},
          "type": "object",
          "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/pt"}, "minItems": 1, "maxItems": 2},
                         "label": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "null"}]}},
          "required": ["points", "label"]}
SUM = 'root ::= [1-9] [0-9]? " " [-+*] " " [1-9] [0-9]? " = " [0-9]{1,3}'

CASES = [
    ("person-greedy", "Describe a person as JSON with name and age.", PERSON, {}),
    ("person-seeded", "Describe a person as JSON with name and age.", PERSON, dict(temperature=0.8, seed=3)),
    ("place-greedy", "Name a European city and its country, as JSON.", PLACE, {}),
    ("shapes-seeded", "Give one or two points as JSON.", SHAPES, dict(temperature=1.0, seed=11, top_k=0, top_p=1.0,
                                                                     min_p=0.0, repeat_penalty=1.1)),
    ("sum-grammar", "Write a small sum.", SUM, {}),
]


@pytest.fixture(scope="module")
def engines(smollm2_gguf):
    from cera_web.engine import Engine
    gpu = asyncio.run(Engine.load(smollm2_gguf, context_size=256))
    with pytest.MonkeyPatch.context() as mp:        # the CPU engine as the float32 reference, not the CPU kernels
        mp.setenv("CERA_WEB_CPU_KERNELS", "0")
        cpu = asyncio.run(Engine.load(smollm2_gguf, context_size=256, device="cpu"))
    yield gpu, cpu
    gpu.close()
    cpu.close()


def fmt(spec):
    return {"type": "grammar", "grammar": spec} if isinstance(spec, str) else \
        {"type": "json_schema", "json_schema": {"name": "t", "schema": spec}}


# the default suite runs a greedy and a seeded schema and the grammar; --all adds the other two (a minute or two each
# on the 2-core CI box; their schemas' features are covered without a model by tests/test_grammar.py)
SLOW_CASES = ("place-greedy", "shapes-seeded")


@pytest.mark.parametrize("name, prompt, spec, settings",
                         [pytest.param(*c, marks=pytest.mark.slow) if c[0] in SLOW_CASES else c for c in CASES],
                         ids=[c[0] for c in CASES])
def test_constrained_output_validates_and_equals_reference(engines, name, prompt, spec, settings):
    gpu, cpu = engines
    got = asyncio.run(gpu.generate(prompt, chat=True, max_tokens=40, response_format=fmt(spec), **settings))
    want = asyncio.run(cpu.generate(prompt, chat=True, max_tokens=40, response_format=fmt(spec), **settings))
    assert got.tokens == want.tokens, (got.text, want.text)
    assert got.stop_reason in ("grammar", "eos"), (got.stop_reason, got.text)
    if isinstance(spec, str):
        assert Recogniser(constraint(grammar=spec)).accepts(got.text.encode())
    else:
        jsonschema.validate(json.loads(got.text), spec)


def test_chat_session_json_object_mode(engines):
    from cera_web.engine import ChatSession
    gpu, _ = engines
    chat = ChatSession(gpu, params={"temperature": 0.0, "repeat_penalty": 1.0})
    r = asyncio.run(chat.send("Give me a JSON object with a key 'ok' set to true.", max_tokens=24,
                              response_format={"type": "json_object"}))
    assert r.stop_reason in ("grammar", "eos"), r.text
    assert isinstance(json.loads(r.text), dict)
    assert chat.messages[-1] == {"role": "assistant", "content": r.text}


def test_bad_constraints_fail_before_generation(engines):
    gpu, _ = engines
    passes = gpu.model.passes
    with pytest.raises(GrammarError, match="minItems 3 is above maxItems 1"):
        asyncio.run(gpu.generate("x", response_format=fmt({"type": "array", "minItems": 3, "maxItems": 1})))
    with pytest.raises(GrammarError, match="left recursion"):
        asyncio.run(gpu.generate("x", grammar='root ::= root "a" | "a"'))
    with pytest.raises(InputError, match="response_format type must be"):
        asyncio.run(gpu.generate("x", response_format={"type": "yaml"}))
    assert gpu.model.passes == passes        # nothing ran on the GPU


def test_logprobs_equal_log_softmax_of_reference_logits(engines):
    """logprobs/top_logprobs from the GPU (logprobs.wgsl) against the CPU engine, whose are numpy's log-softmax of
    the reference model's float32 logits. Tolerance 2e-3: the logits themselves agree to ~1e-4 (test_engine)."""
    gpu, cpu = engines
    kw = dict(max_tokens=6, top_logprobs=5, repeat_penalty=1.0, temperature=0.0, presence_penalty=0.3,
              logit_bias={504: -5.0})
    got = asyncio.run(gpu.generate("The capital of France is", **kw))
    want = asyncio.run(cpu.generate("The capital of France is", **kw))
    assert got.tokens == want.tokens and len(got.logprobs) == len(got.tokens)
    for g, w in zip(got.logprobs, want.logprobs):
        assert abs(g["logprob"] - w["logprob"]) < 2e-3
        assert [i for i, _ in g["top_logprobs"]] == [i for i, _ in w["top_logprobs"]]
        for (_, a), (_, b) in zip(g["top_logprobs"], w["top_logprobs"]):
            assert abs(a - b) < 2e-3
    plain = asyncio.run(gpu.generate("The capital of France is", max_tokens=6))
    assert plain.logprobs is None          # read back only when asked


@pytest.mark.parametrize("arch", ["lfm2", "qwen3"])
def test_overlapped_steps_equal_serial_steps_and_keep_the_cache(arch):
    """The overlapped constrained decode (engine._Overlapped: the next forward pass runs while the token is
    read) gives the tokens and logprobs of one plain step per read (engine.overlap = False), greedy and seeded; and
    after its stop (a forward pass ran past it) the cache and LFM2's conv state are those of the tokens kept: a
    continuation that reuses the cache equals one that prefills everything."""
    from pathlib import Path

    from cera_web.engine import Engine
    path = Path(__file__).parent / "fixtures" / "small" / f"{arch}-q8_0.gguf"
    e = asyncio.run(Engine.load(path, context_size=128))
    try:
        grammar = 'root ::= "[" [a-z]{1,6} ("," [a-z]{1,6}){2} "]"'
        prompt = e.tokenizer.encode("Words:")
        for kw in ({}, dict(temperature=1.0, seed=9, top_k=0, top_p=1.0, min_p=0.0, top_logprobs=3)):
            runs = []
            for overlap in (False, True):
                e.overlap = overlap
                r = asyncio.run(e.generate(prompt, max_tokens=40, grammar=grammar, **kw))
                more = r.prompt_tokens + r.tokens + e.tokenizer.encode(" next")
                again = asyncio.run(e.generate(more, max_tokens=6, reuse_cache=True))
                fresh = asyncio.run(e.generate(more, max_tokens=6))
                assert again.cached_tokens > len(prompt) and again.tokens == fresh.tokens, (overlap, kw)
                runs.append(r)
            assert runs[0].stop_reason == "grammar" and Recogniser(constraint(grammar=grammar)).accepts(
                runs[0].text.encode()), runs[0].text
            assert runs[1].tokens == runs[0].tokens and runs[1].logprobs == runs[0].logprobs, kw
    finally:
        e.close()
