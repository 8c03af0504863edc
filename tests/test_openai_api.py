"""The OpenAI-shaped API (cera_web.openai_api) on the real model: response dict shapes, streaming equal to the
non-streamed reply, n choices reproducible with a seed, tool calls constrained so they parse and call the Python
function, logprobs, JSON schema, and the raw-text completions. The API's shapes and bookkeeping are under test, not
the kernels (test_engine, test_constrained and test_matvec_q8 hold the GPU path to the references), so the engine
runs on the CPU backend (the numpy reference model: ~10x faster than lavapipe on two cores). Replies are kept short.
"""
import asyncio
import json
from typing import Literal, Optional

import jsonschema
import pytest

from cera_web.errors import InputError
from cera_web.grammar import Recogniser
from cera_web.openai_api import function_tool, parse_tool_calls, tool_grammar


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def engine(smollm2_gguf):
    from cera_web.engine import Engine
    eng = run(Engine.load(smollm2_gguf, context_size=512, device="cpu"))
    yield eng
    eng.close()


MSGS = [{"role": "user", "content": "What is the capital of France?"}]


def get_weather(city: str, unit: Literal["C", "F"] = "C", days: Optional[int] = None) -> dict:
    """Get the weather forecast for a city.

    More text that is not part of the description."""
    CALLS.append((city, unit, days))
    return {"city": city, "temperature": 21, "unit": unit}


CALLS = []


def test_function_tool_schema_and_tool_grammar():
    spec = function_tool(get_weather)
    assert spec == {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather forecast for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"enum": ["C", "F"]},
            "days": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}, "required": ["city"]}}}
    ok = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "F"}}</tool_call>'
    req = Recogniser(tool_grammar([spec], "required"))
    auto = Recogniser(tool_grammar([spec], "auto"))
    assert req.accepts(ok.encode()) and auto.accepts(ok.encode()) and auto.accepts(b"It is sunny.")
    assert not req.accepts(b"It is sunny.")
    assert not req.accepts(ok.replace('"Paris"', "7").encode())                   # city must be a string
    assert not req.accepts(ok.replace("get_weather", "get_time").encode())        # unknown tool
    calls = parse_tool_calls(ok)
    assert calls[0]["function"] == {"name": "get_weather", "arguments": '{"city":"Paris","unit":"F"}'}
    assert parse_tool_calls("plain text") is None


def test_chat_completion_shape_and_equal_to_generate(engine):
    r = run(engine.chat.completions.create(messages=MSGS, max_tokens=6, temperature=0))
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-") and r["model"] == engine.name
    c = r["choices"][0]
    assert c["index"] == 0 and c["message"]["role"] == "assistant" and c["finish_reason"] == "length"
    ref = run(engine.generate(MSGS[0]["content"], chat=True, max_tokens=6))
    assert c["message"]["content"] == ref.text
    n = len(ref.prompt_tokens)
    assert ref.cached_tokens == n - 1           # the request left its prompt in the cache
    again = run(engine.chat.completions.create(messages=MSGS, max_tokens=6, temperature=0))
    assert again["usage"] == {"prompt_tokens": n, "completion_tokens": 6, "total_tokens": n + 6,
                              "prompt_tokens_details": {"cached_tokens": n - 1},
                              "completion_tokens_details": {"accepted_prediction_tokens": 0,
                                                            "rejected_prediction_tokens": 0}}
    assert again["choices"][0]["message"]["content"] == c["message"]["content"]


def test_stream_equals_non_streamed(engine):
    async def go():
        full = await engine.chat.completions.create(messages=MSGS, max_tokens=8, seed=4, temperature=0.8)
        chunks = [c async for c in await engine.chat.completions.create(messages=MSGS, max_tokens=8, seed=4,
                                                                          temperature=0.8, stream=True)]
        return full, chunks
    full, chunks = run(go())
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == full["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == full["choices"][0]["finish_reason"]


def test_n_choices_with_a_seed_are_reproducible(engine):
    kw = dict(messages=MSGS, max_tokens=5, n=3, seed=21, temperature=1.0)
    a = run(engine.chat.completions.create(**kw))
    b = run(engine.chat.completions.create(**kw))
    texts = [c["message"]["content"] for c in a["choices"]]
    assert texts == [c["message"]["content"] for c in b["choices"]]
    assert [c["index"] for c in a["choices"]] == [0, 1, 2] and len(set(texts)) > 1
    assert a["usage"]["completion_tokens"] == 15


def test_tool_call_parses_and_auto_call_calls_the_function(engine):
    CALLS.clear()
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    # one round: the forced call is generated, parsed and the function called with its arguments
    r = run(engine.chat.completions.create(messages=msgs, tools=[get_weather], tool_choice="required",
                                           auto_call=True, max_tool_rounds=1, max_tokens=40, temperature=0))
    c = r["choices"][0]
    assert c["finish_reason"] == "tool_calls" and c["message"]["content"] is None
    call = c["message"]["tool_calls"][0]
    args = json.loads(call["function"]["arguments"])
    assert call["function"]["name"] == "get_weather" and isinstance(args["city"], str)
    jsonschema.validate(args, function_tool(get_weather)["function"]["parameters"])
    assert CALLS == [(args["city"], args.get("unit", "C"), args.get("days"))]


def test_logprobs_and_json_schema(engine):
    schema = {"type": "object", "properties": {"capital": {"enum": ["Paris", "Lyon"]}}, "required": ["capital"]}
    r = run(engine.chat.completions.create(
        messages=MSGS, max_tokens=24, temperature=0, logprobs=True, top_logprobs=2,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}))
    c = r["choices"][0]
    jsonschema.validate(json.loads(c["message"]["content"]), schema)
    entries = c["logprobs"]["content"]
    assert len(entries) == r["usage"]["completion_tokens"]
    assert "".join(e["token"] for e in entries) == c["message"]["content"]
    for e in entries:
        assert e["logprob"] <= 0 and len(e["top_logprobs"]) <= 2
        assert e["top_logprobs"][0]["logprob"] >= e["logprob"] - 1e-6   # greedy: the drawn token is the top one


def test_text_completions(engine):
    r = run(engine.completions.create(prompt="The capital of France is", max_tokens=4, temperature=0, logprobs=1))
    ref = run(engine.generate("The capital of France is", max_tokens=4))
    c = r["choices"][0]
    assert r["object"] == "text_completion" and c["text"] == ref.text and c["finish_reason"] == "length"
    assert len(c["logprobs"]["tokens"]) == 4 and all(len(t) == 1 for t in c["logprobs"]["top_logprobs"])


def test_bad_requests(engine):
    with pytest.raises(InputError, match="unsupported argument"):
        run(engine.chat.completions.create(messages=MSGS, best_of=3))
    with pytest.raises(InputError, match="n must be"):
        run(engine.chat.completions.create(messages=MSGS, n=0))
    with pytest.raises(InputError, match="tool_choice names the function"):
        run(engine.chat.completions.create(messages=MSGS, tools=[get_weather],
                                           tool_choice={"type": "function", "function": {"name": "nope"}}))
