"""The OpenAI-shaped API from JavaScript: the worker's requests 'chat.completions.create' and 'completions.create'
(cera_web.protocol, cera_web.webapp.handle, web/worker.js) and the ES module web/cera.js, against the Python API
(cera_web.openai_api) run natively on the same requests.

CPython: the glue posts 'chunk' messages and one 'done' whose payloads equal what engine.chat.completions.create
returns (and whose run fields agree with the reply's usage); bad requests become one 'error' and the next request
still works. What is
tested is the protocol, not the kernels, so the glue's engine runs on the CPU backend (prepare(backend="cpu"): the
numpy reference model, ~10x faster than lavapipe on two cores); the kernels' own tests hold the GPU path to the same
references.

Browser (headless Chromium, Pyodide, the default model; the page's 'auto' backend takes the CPU path on SwiftShader):
web/api.html imports cera.js; its results equal the native Python API's for the same request. Greedy requests only
where the page tests already match the reference (the "What is the capital of France?" chat turn: its 7 greedy tokens
end with EOS). Logprobs are compared within LOGPROB_TOL: numpy in Pyodide and natively may sum float32 in other
orders (as SwiftShader and lavapipe do, through 30 layers); the tokens and their ranking must be equal.
"""
from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

from cera_web import webapp

MSGS = [{"role": "user", "content": "What is the capital of France?"}]
SCHEMA = {"type": "object", "properties": {"capital": {"enum": ["Paris", "Lyon"]}}, "required": ["capital"]}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather forecast for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                     "unit": {"enum": ["C", "F"]}},
                   "required": ["city"], "additionalProperties": False}}}
LOGPROB_TOL = 2e-2

# The requests the browser and the native engine both answer (greedy). In Chromium on two cores (SwiftShader) the
# chat turn takes about a minute, the schema reply two, the tool call (a 140-token prompt, 36 tokens) five or more.
REQUESTS = {
    "chat": dict(messages=MSGS, max_tokens=12, temperature=0, logprobs=True, top_logprobs=3),
    "stream": dict(messages=MSGS, max_tokens=3, temperature=0, stream=True),
    "schema": dict(messages=MSGS, max_tokens=24, temperature=0,
                   response_format={"type": "json_schema", "json_schema": {"name": "capital", "schema": SCHEMA}}),
    "tool": dict(messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=[WEATHER],
                 tool_choice="required", max_tokens=40, temperature=0),
    "text": dict(prompt="The capital of France is", max_tokens=3, temperature=0),
}


def _in_thread(coro_fn, *args, **kw):
    """Run a coroutine in a thread of its own (sync Playwright keeps an event loop running in this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(coro_fn(*args, **kw))).result()


@pytest.fixture(scope="module")
def glue(smollm2_gguf):
    """webapp with the default model loaded natively on the CPU backend; the messages it posts collect in glue.sent
    (parsed)."""
    from cera_web.source import FileSource
    sent = []
    webapp.init(lambda text: sent.append(json.loads(text)))
    assert _in_thread(webapp.prepare, "", "cpu"), sent
    assert _in_thread(webapp.load_source, FileSource(smollm2_gguf)), sent
    assert sent[-1]["type"] == "ready" and sent[-1]["backend_kind"] == "cpu", sent[-1]
    webapp.sent = sent
    yield webapp
    webapp._state.engine.close()
    webapp._state = webapp._Worker()      # as a fresh module: later glue callers load on the GPU
    del webapp.sent


def _api(glue, rid, method, params) -> list[dict]:
    """Send one API request through the glue; the messages it posted but the prompt's progress."""
    glue.sent.clear()
    _in_thread(glue.handle, json.dumps({"type": method, "id": rid, "params": params}))
    assert glue.sent and all(m["id"] == rid for m in glue.sent), glue.sent
    return [m for m in glue.sent if m["type"] != "prompt"]


def _native(glue, method, params):
    engine = glue._state.engine
    api = engine.chat.completions if method == "chat.completions.create" else engine.completions
    return _in_thread(api.create, **params)


def _same_usage(got: dict, want: dict):
    """Equal usage but for the cached prompt tokens, which depend on what each engine ran before (prefix reuse is
    the default): fewer than the prompt's on both sides."""
    g, w = dict(got), dict(want)
    g_cached, w_cached = g.pop("prompt_tokens_details")["cached_tokens"], w.pop("prompt_tokens_details")["cached_tokens"]
    assert g == w and 0 <= g_cached < g["prompt_tokens"] and 0 <= w_cached < w["prompt_tokens"], (got, want)


def _same_reply(got: dict, want: dict, tool: bool = False):
    """Equal but for ids and times (and tool call ids), and the cached prompt tokens (_same_usage)."""
    assert got["object"] == want["object"] and got["model"] == want["model"]
    _same_usage(got["usage"], want["usage"])
    for g, w in zip(got["choices"], want["choices"], strict=True):
        assert g["finish_reason"] == w["finish_reason"]
        if "message" in w:
            gm, wm = dict(g["message"]), dict(w["message"])
            if tool:
                gm["tool_calls"] = [c["function"] for c in gm["tool_calls"]]
                wm["tool_calls"] = [c["function"] for c in wm["tool_calls"]]
            assert gm == wm
        else:
            assert g["text"] == w["text"]
        if w.get("logprobs"):
            for ge, we in zip(g["logprobs"]["content"], w["logprobs"]["content"], strict=True):
                assert ge["token"] == we["token"]
                assert [t["token"] for t in ge["top_logprobs"]] == [t["token"] for t in we["top_logprobs"]]
                pairs = [(ge["logprob"], we["logprob"])] + [(a["logprob"], b["logprob"]) for a, b in
                                                            zip(ge["top_logprobs"], we["top_logprobs"])]
                assert all(abs(a - b) < LOGPROB_TOL for a, b in pairs), (ge["token"], pairs)


# -- CPython: the worker's Python glue --------------------------------------------------------------------------------


def test_glue_answers_like_the_python_api(glue):
    params = dict(REQUESTS["chat"], max_tokens=4)
    msgs = _api(glue, 1, "chat.completions.create", params)
    assert [m["type"] for m in msgs] == ["done"]
    _same_reply(msgs[0]["result"], _native(glue, "chat.completions.create", params))
    # the run of the request, in the fields a page run's 'done' has: they agree with the reply
    done = msgs[0]
    assert done["stop_reason"] == "max_tokens" and len(done["tokens"]) == 4 == done["result"]["usage"][
        "completion_tokens"] and len(done["prompt_tokens"]) == done["result"]["usage"]["prompt_tokens"]
    assert done["text"] == done["result"]["choices"][0]["message"]["content"]
    assert [e["text"] for e in done["logprobs"]] == [e["token"] for e in done["result"]["choices"][0]["logprobs"][
        "content"]]
    for name in ("schema", "tool"):        # constrained requests cross the protocol as any other
        msgs = _api(glue, name, "chat.completions.create", REQUESTS[name])
        assert [m["type"] for m in msgs] == ["done"]
        _same_reply(msgs[0]["result"], _native(glue, "chat.completions.create", REQUESTS[name]), tool=name == "tool")
    jsonschema.validate(json.loads(msgs[0]["result"]["choices"][0]["message"]["tool_calls"][0]["function"]
                                   ["arguments"]), WEATHER["function"]["parameters"])
    # streamed: chunks, then a null result; the deltas concatenate to the reply
    msgs = _api(glue, "s", "chat.completions.create", dict(params, stream=True))
    assert [m["type"] for m in msgs[:-1]] == ["chunk"] * (len(msgs) - 1) and msgs[-1]["type"] == "done"
    assert msgs[-1]["result"] is None and msgs[-1]["id"] == "s" and len(msgs[-1]["tokens"]) == 4
    chunks = [m["chunk"] for m in msgs[:-1]]
    want = _native(glue, "chat.completions.create", params)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == \
        want["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    _same_usage(chunks[-1]["usage"], want["usage"])


BAD = [   # (method, params, the param the error names, a piece of its message)
    ("chat.completions.create", {"messages": MSGS, "n": 0}, "n", "n must be an integer between 1 and 16"),
    ("chat.completions.create", {"messages": MSGS, "best_of": 2}, "best_of", "unsupported argument(s) best_of"),
    ("chat.completions.create", {"messages": MSGS, "temperature": "hot"}, "temperature", "temperature must be"),
    ("chat.completions.create", {}, None, "missing 1 required keyword-only argument: 'messages'"),
    ("chat.completions.create", {"messages": MSGS, "auto_call": True}, "auto_call", "cannot cross the worker"),
    ("chat.completions.create", {"messages": MSGS, "response_format": {"type": "json_schema", "json_schema": {
        "schema": {"type": "string", "pattern": "a(?=b)"}}}}, None, "#/pattern: a lookahead"),
    ("completions.create", {"prompt": "Hi", "stream": "yes"}, "stream", "stream must be true or false"),
    ("images.generate", {}, None, "unknown request type 'images.generate'"),
]


def test_glue_bad_requests_give_one_error_and_the_next_request_works(glue):
    for method, params, param, needle in BAD:
        msgs = _api(glue, 7, method, params)
        assert len(msgs) == 1 and msgs[0]["type"] == "error", msgs
        err = msgs[0]
        assert needle in err["message"] and "\n" not in err["message"], err
        assert err["error_type"] == "invalid_request_error" and err["param"] == param, err
        assert err["during"] == method, err
    msgs = _api(glue, 8, "completions.create", REQUESTS["text"])
    _same_reply(msgs[0]["result"], _native(glue, "completions.create", REQUESTS["text"]))


# -- the browser: web/cera.js driving the worker ------------------------------------------------------------------------

LOAD_MS = 600_000


@pytest.fixture(scope="module")
def api_page(browser, server_url):
    """web/api.html (which imports cera.js and loads the default model into window.cera), loaded once."""
    from playwright.sync_api import expect
    context = browser.new_context()
    page = context.new_page()
    console = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    page.goto(server_url + "/web/api.html")
    try:
        expect(page.get_by_role("status")).to_have_text(re.compile(r"^Ready: |^Loading failed"), timeout=LOAD_MS)
        # the model named as the chat page's menu names it (web/ggufmeta.js), then its file
        expect(page.get_by_role("status")).to_have_text(
            re.compile(r"^Ready: SmolLM2 135M Instruct \(SmolLM2-135M-Instruct\.Q4_1\.gguf\) on "), timeout=1)
    except AssertionError as e:
        raise AssertionError(f"{e}\n" + "\n".join(console[-30:])) from None
    page.console = console
    yield page
    context.close()


def _evaluate(page, script: str, arg=None):
    try:
        return page.evaluate(script, arg)
    except Exception as e:
        raise AssertionError(f"{e}\n" + "\n".join(page.console[-30:])) from None


def test_cera_js_replies_equal_the_python_api(api_page, glue):
    got = _evaluate(api_page, """async (req) => {
        const out = {};
        out.chat = await cera.chat.completions.create(req.chat);
        out.chunks = [];
        for await (const c of await cera.chat.completions.create(req.stream)) out.chunks.push(c);
        out.text = await cera.completions.create(req.text);
        return out;
    }""", REQUESTS)
    for name in ("chat", "text"):
        method = "completions.create" if name == "text" else "chat.completions.create"
        _same_reply(got[name], _native(glue, method, REQUESTS[name]))
    assert got["chat"]["choices"][0]["finish_reason"] == "stop"            # the greedy answer ends with EOS
    # the stream: a role chunk, content deltas that make the reply, a last chunk with the finish reason and usage
    want = _native(glue, "chat.completions.create", dict(REQUESTS["stream"], stream=False))
    chunks = got["chunks"]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == \
        want["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    _same_usage(chunks[-1]["usage"], want["usage"])


@pytest.mark.slow   # ~7 min on two cores; test_glue_answers_like_the_python_api sends these requests natively in CI
def test_cera_js_schema_and_tool_replies_equal_the_python_api(api_page, glue):
    got = _evaluate(api_page, """async (req) => ({schema: await cera.chat.completions.create(req.schema),
                                                 tool: await cera.chat.completions.create(req.tool)})""", REQUESTS)
    for name in ("schema", "tool"):
        _same_reply(got[name], _native(glue, "chat.completions.create", REQUESTS[name]), tool=name == "tool")
    jsonschema.validate(json.loads(got["schema"]["choices"][0]["message"]["content"]), SCHEMA)
    call = got["tool"]["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather"
    jsonschema.validate(json.loads(call["arguments"]), WEATHER["function"]["parameters"])


def test_cera_js_errors_abort_and_the_next_request(api_page, glue):
    got = _evaluate(api_page, """async (req) => {
        const out = {};
        const failure = async (promise) => {
            try { await promise; return null; } catch (e) { return {name: e.name, message: e.message, type: e.type,
                                                                    param: e.param}; }
        };
        out.bad = await failure(cera.chat.completions.create({messages: req.chat.messages, n: 0}));
        out.fn = await failure(cera.chat.completions.create({messages: req.chat.messages, tools: [() => 1]}));
        // a stream stopped after its first text: it ends as a stop would, with the text so far
        const story = {messages: [{role: 'user', content: 'Tell me a long story about a dragon.'}], max_tokens: 4000,
                       temperature: 0};
        const stream = await cera.chat.completions.create({...story, stream: true});
        out.chunks = [];
        for await (const c of stream) {
            out.chunks.push(c);
            if (c.choices[0].delta.content) stream.controller.abort();
        }
        // an AbortSignal: a queued request aborted before it starts rejects; the running one ends early
        const running = new AbortController(), queued = new AbortController();
        const first = cera.chat.completions.create(story, {signal: running.signal});
        const second = failure(cera.completions.create(req.text, {signal: queued.signal}));
        queued.abort();
        out.queued = await second;
        await new Promise((r) => setTimeout(r, 3000));
        running.abort();
        out.stopped = await first;
        out.text = await cera.completions.create(req.text);      // and the engine still answers
        // a draft model that cannot be had is one error; dropping none is a 'draft' message saying none
        out.draft = await failure(cera.loadDraft('/models/no-such-draft.gguf'));
        out.nodraft = await cera.loadDraft(null);
        return out;
    }""", REQUESTS)
    assert got["bad"] == {"name": "CeraError", "message": got["bad"]["message"], "type": "invalid_request_error",
                          "param": "n"} and "n must be an integer" in got["bad"]["message"], got["bad"]
    assert got["fn"]["name"] == "TypeError" and "functions cannot cross to the worker" in got["fn"]["message"]
    last = got["chunks"][-1]
    assert last["choices"][0]["finish_reason"] == "stop" and 0 < last["usage"]["completion_tokens"] < 4000, last
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in got["chunks"])
    assert text.strip(), got["chunks"]
    assert got["queued"]["name"] == "AbortError", got["queued"]
    c = got["stopped"]["choices"][0]
    assert c["finish_reason"] == "stop" and got["stopped"]["usage"]["completion_tokens"] < 4000, got["stopped"]
    _same_reply(got["text"], _native(glue, "completions.create", REQUESTS["text"]))
    assert got["draft"]["name"] == "CeraError" and "no-such-draft.gguf" in got["draft"]["message"], got["draft"]
    assert got["nodraft"]["type"] == "draft" and got["nodraft"]["name"] is None, got["nodraft"]
