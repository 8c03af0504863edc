"""The page's "Structured output" setting and "Show token probabilities" view (issue 15), in headless Chromium
(real Pyodide, WebGPU on SwiftShader).

- webapp.token_probs (CPython): the per-token texts add up to the reply, the top alternatives are named by text
- raw completion, the tiny random model (fast): a grammar that names an undefined rule is refused next to its field
  before anything runs (the prompt stays); a good one constrains the output; with the probabilities shown each
  token is a tinted span whose tooltip lists the top 5 (greedy: the token itself first), and the view goes back to
  plain text when the toggle is off
- chat, the tiny model (default run): JSON Schema mode refuses a schema with a keyword a grammar cannot enforce
  next to the field, naming the keyword and its path, before anything runs (the message stays); with a schema of
  numeric bounds, a pattern and an enum the reply equals the Python API's natively (same conversation, greedy),
  validates with `jsonschema` and is shown as a formatted JSON code block
- chat, SmolLM2 (the slow one: one prefill, one constrained reply): a malformed schema (not JSON) and an
  unsatisfiable one (minItems above maxItems) are refused next to the field with the message kept; with a schema
  of a nested object, enums and an array pasted and the probabilities shown, the reply's tooltips give the same
  probabilities as the Python API natively (same conversation, greedy, logprobs) within the stated tolerance, and
  with the toggle off the reply is a formatted JSON code block that validates with `jsonschema`
- screenshots of both at 390x844 and 1280x800 go to $CERA_SCREENSHOTS when set (else pytest's tmp_path)
"""
from __future__ import annotations

import asyncio
import json
import math
import re

import pytest

from test_page_ui import GENERATE_MS, TINY, UI, _in_thread, _screenshot

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect

SCHEMA = {"type": "object",
          "properties": {"city": {"enum": ["Paris", "Rome", "Berlin"]},
                         "where": {"type": "object",
                                   "properties": {"country": {"enum": ["France", "Italy", "Germany"]}},
                                   "required": ["country"]},
                         "sights": {"type": "array", "items": {"enum": ["tower", "museum", "river"]},
                                    "minItems": 1, "maxItems": 2}},
          "required": ["city", "where", "sights"]}
# SwiftShader on the 2-core box: ~0.5 tok/s prefill, 0.1-1 tok/s constrained decode (one readback a step), so both
# are kept short: a system prompt shorter than SmolLM2's default, asking for one line (39 tokens, not 49)
QUESTION = "Paris facts"
SYSTEM = "Reply in one line of JSON."
MAX_TOKENS = 60
SLOW_MS = 900_000
# SwiftShader in the page vs lavapipe natively: the same WGSL, float32, summed in other orders; logprobs agree to
# about 1e-3 (tests/test_constrained.py: 2e-3 against numpy). The page shows probabilities to 3 significant digits.
LOGPROB_TOL = 5e-3


def test_token_probs_texts_add_up_to_the_reply():
    from cera_web.engine import Engine
    from cera_web.webapp import token_probs

    async def run():
        engine = await Engine.load(str(TINY), context_size=256, cpu_fallback=False)
        try:
            r = await engine.generate("héllo wörld", max_tokens=12, ignore_eos=True, top_logprobs=3)
            return r, token_probs(r, engine.tokenizer), [engine.tokenizer.token_bytes(t) for t in r.tokens]
        finally:
            engine.close()

    r, view, pieces = _in_thread(lambda: asyncio.run(run()))
    assert "".join(v["text"] for v in view) == r.text == b"".join(pieces).decode("utf-8", "replace")
    for v, lp in zip(view, r.logprobs):
        assert v["logprob"] == lp["logprob"] and len(v["top"]) == 3
    assert token_probs(type(r)(prompt_tokens=[1]), None) is None     # not asked for: nothing


def _tip(ui, span):
    """Hover a token span; returns (head token text, head percent, [(text, percent)] of the tooltip's list)."""
    span.hover()
    tip = ui.page.locator("#token-tip")
    expect(tip).to_be_visible()
    head = tip.locator(".tip-head")
    token = json.loads(head.locator("code").text_content())
    p = float(re.search(r"([\d.e+-]+)%$", head.text_content()).group(1)) / 100
    rows = [(json.loads(li.locator("code").text_content()), float(li.locator(".p").text_content()[:-1]) / 100)
            for li in tip.locator("li").all()]
    return token, p, rows


def _check_greedy_tip(token, p, rows, n):
    """n: how many alternatives there are (5, or fewer where the grammar allows fewer tokens)."""
    assert len(rows) == n, rows
    assert rows[0][0] == token and abs(rows[0][1] - p) <= 1e-2 * p, (token, p, rows)   # greedy: the top alternative
    ps = [q for _, q in rows]
    assert all(0 < q <= 1 for q in ps) and ps == sorted(ps, reverse=True), ps


@pytest.mark.browser
def test_raw_grammar_and_token_probabilities_tiny_model(browser, server_url, tmp_path):
    ui = UI(browser, server_url)
    try:
        ui.wait()
        page = ui.page
        page.get_by_label("Raw completion").check()
        prompt = page.get_by_label("Prompt", exact=True)
        prompt.fill("Answer:")
        page.get_by_label("Max tokens").fill("8")
        ui.setting("Structured output").select_option("Grammar (GBNF)")
        grammar = page.get_by_label("Grammar (GBNF)", exact=True)
        grammar.fill('root ::= answer " " [0-9]{2}')
        page.get_by_role("button", name="Generate").click()
        error = page.locator("#structured-error")
        expect(error).to_have_text("Structured output: rule 'root' refers to 'answer', which is not defined")
        expect(error).to_have_attribute("data-kind", "GrammarError")
        expect(prompt).to_have_value("Answer:")
        assert not ui.received("done")
        # a good grammar, with the probabilities shown
        grammar.fill('root ::= ("yes" | "no") " " [0-9]{2}')
        page.get_by_label("Show token probabilities").check()
        page.get_by_role("button", name="Generate").click()
        ui.wait(r"^Ready \(", GENERATE_MS)
        expect(error).to_be_empty()
        done = ui.received("done")[-1]
        assert re.fullmatch(r"(yes|no) [0-9]{2}", done["text"]), done["text"]
        output = page.locator("#output")
        spans = output.locator(".tok")
        expect(spans).to_have_count(len(done["tokens"]))
        assert "".join(spans.all_text_contents()) == done["text"]
        token, p, rows = _tip(ui, spans.first)
        _check_greedy_tip(token, p, rows, len(done["logprobs"][0]["top"]))
        assert token == done["logprobs"][0]["text"] and 1 < len(rows) <= 5
        assert abs(p - math.exp(done["logprobs"][0]["logprob"])) <= 5e-3 * p
        assert output.locator(".tok").first.evaluate("(s) => getComputedStyle(s).backgroundColor") != "rgba(0, 0, 0, 0)"
        # by keyboard: focus the reply, then the arrow keys go from token to token, each showing its tooltip
        page.mouse.move(0, 0)
        output.locator(".token-view").focus()
        page.keyboard.press("ArrowRight")
        second = json.dumps(done["logprobs"][1]["text"], ensure_ascii=False)
        expect(page.locator("#token-tip .tip-head code")).to_have_text(second)
        expect(spans.nth(1)).to_be_focused()
        _screenshot(page, "structured-raw-1280x720.png", tmp_path)
        # off: the plain text again; the settings stay through a mode switch
        page.get_by_label("Show token probabilities").uncheck()
        expect(output).to_have_text(done["text"])
        assert output.locator(".tok").count() == 0
        page.get_by_label("Chat", exact=True).check()
        page.get_by_label("Raw completion").check()
        expect(ui.setting("Structured output")).to_have_value("grammar")
        expect(grammar).to_have_value('root ::= ("yes" | "no") " " [0-9]{2}')
    finally:
        ui.close()


# small: the tiny random model writes many blanks between tokens and has a 128-token context (70 tokens here)
TINY_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["n", "code"],
               "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9},
                              "code": {"type": "string", "pattern": "^[A-Z]{2}$"}}}
TINY_ASK = "JSON please"


@pytest.mark.browser
def test_chat_json_schema_tiny_model(browser, server_url, tmp_path):
    import jsonschema
    from cera_web.engine import ChatSession, Engine

    async def native():
        engine = await Engine.load(str(TINY), device="cpu")
        try:
            r = await ChatSession(engine).send(TINY_ASK, max_tokens=90, temperature=0, response_format={
                "type": "json_schema", "json_schema": {"schema": TINY_SCHEMA}})
            return r.text, r.stop_reason
        finally:
            engine.close()

    text, stop = _in_thread(lambda: asyncio.run(native()))
    assert stop == "grammar", (stop, text)      # the reply is complete within the tiny model's context
    ui = UI(browser, server_url)
    try:
        ui.wait()
        page = ui.page
        ui.setting("Temperature").fill("0")
        page.get_by_label("Max tokens").fill("90")
        ui.setting("Structured output").select_option("JSON Schema")
        schema_box = page.get_by_label("JSON Schema", exact=True)
        error = page.locator("#structured-error")
        schema_box.fill(json.dumps({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}))
        ui.message.fill(TINY_ASK)
        ui.send.click()
        expect(error).to_contain_text("Structured output: JSON Schema error at #/properties/tags/uniqueItems: "
                                      "uniqueItems (with maxItems above 1) cannot be enforced by a grammar")
        expect(error).to_have_attribute("data-kind", "GrammarError")
        expect(ui.message).to_have_value(TINY_ASK)
        expect(ui.log.locator(".turn")).to_have_count(0)
        schema_box.fill(json.dumps(TINY_SCHEMA, indent=2))
        ui.send.click()
        ui.wait(r"^Ready \(", GENERATE_MS)
        expect(error).to_be_empty()
        done = ui.received("done")[-1]
        assert done["text"] == text, (done["text"], text)
        value = json.loads(text)
        jsonschema.validate(value, TINY_SCHEMA)
        code = ui.log.locator(".turn.assistant").last.locator("pre code")
        expect(code).to_have_count(1)
        assert code.text_content() == json.dumps(value, indent=2)
        _screenshot(page, "structured-schema-tiny-1280x720.png", tmp_path)
    finally:
        ui.close()


def _native_reply(model_path):
    """The reply and logprobs of the Python API natively (lavapipe) for the page's conversation and settings."""
    from cera_web.engine import ChatSession, Engine

    async def run():
        engine = await Engine.load(str(model_path), context_size=2048, cpu_fallback=False)
        try:
            chat = ChatSession(engine, system=SYSTEM)
            r = await chat.send(QUESTION, max_tokens=MAX_TOKENS, temperature=0, logprobs=True, top_logprobs=5,
                                response_format={"type": "json_schema", "json_schema": {"schema": SCHEMA}})
            return r.text, r.tokens, r.logprobs
        finally:
            engine.close()

    return _in_thread(lambda: asyncio.run(run()))


@pytest.mark.browser
@pytest.mark.slow   # ~4.5 min on 2 cores; test_raw_grammar_and_token_probabilities_tiny_model covers the same views
def test_chat_json_schema_and_token_probabilities_smollm2(browser, server_url, smollm2_gguf, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    text, tokens, logprobs = _native_reply(smollm2_gguf)
    ui = UI(browser, server_url, query="")     # the default model
    try:
        ui.wait()
        page = ui.page
        ui.setting("Temperature").fill("0")
        ui.setting("System prompt").fill(SYSTEM)
        page.get_by_label("Max tokens").fill(str(MAX_TOKENS))
        ui.setting("Structured output").select_option("JSON Schema")
        schema_box = page.get_by_label("JSON Schema", exact=True)
        error = page.locator("#structured-error")
        # not JSON: said next to the field at once; nothing is sent, the message stays
        schema_box.fill('{"type": "object", "properties": {"a": }}')
        ui.message.fill(QUESTION)
        ui.send.click()
        expect(error).to_contain_text("Structured output: the JSON Schema is not valid JSON (the browser says: ")
        expect(ui.message).to_have_value(QUESTION)
        expect(ui.log.locator(".turn")).to_have_count(0)
        # JSON, but no output can satisfy it: Python says so before generating; the message comes back
        schema_box.fill('{"type": "array", "minItems": 3, "maxItems": 1}')
        ui.send.click()
        expect(error).to_contain_text("minItems 3 is above maxItems 1")
        expect(error).to_have_attribute("data-kind", "GrammarError")
        expect(ui.message).to_have_value(QUESTION)
        expect(ui.log.locator(".turn")).to_have_count(0)
        assert "\n" not in error.text_content()
        # the schema, with the probabilities shown
        schema_box.fill(json.dumps(SCHEMA, indent=2))
        page.get_by_label("Show token probabilities").check()
        ui.send.click()
        ui.wait(r"^Ready \(", SLOW_MS)
        done = ui.received("done")[-1]
        print("page timings:", {k: done[k] for k in ("prefill_ms", "decode_ms", "prompt_tokens", "tokens")})
        assert done["tokens"] == tokens and done["text"] == text, (done["text"], text)
        reply = ui.log.locator(".turn.assistant").last
        spans = reply.locator(".tok")
        expect(spans).to_have_count(len(tokens))
        assert "".join(spans.all_text_contents()) == text
        for i in [0, 1, 2, len(tokens) // 2, len(tokens) - 1]:      # a few tokens, hovered, against the Python API
            token, p, rows = _tip(ui, spans.nth(i))
            want = logprobs[i]
            _check_greedy_tip(token, p, rows, min(5, len(want["top_logprobs"])))
            assert abs(math.log(p) - want["logprob"]) < LOGPROB_TOL, (i, p, want)
            for (_, q), (_, w) in zip(rows, want["top_logprobs"]):
                assert abs(math.log(q) - w) < LOGPROB_TOL, (i, rows, want)
        for width, height in [(390, 844), (1280, 800)]:
            page.set_viewport_size({"width": width, "height": height})
            _tip(ui, spans.nth(3))
            assert ui.page_width() == [width, width, width]
            box = page.locator("#token-tip").bounding_box()
            assert 0 <= box["x"] and box["x"] + box["width"] <= width, box
            _screenshot(page, f"structured-chat-{width}x{height}.png", tmp_path)
        # the normal view: a formatted JSON code block that validates
        page.get_by_label("Show token probabilities").uncheck()
        code = reply.locator("pre code")
        expect(code).to_have_count(1)
        value = json.loads(code.text_content())
        jsonschema.validate(value, SCHEMA)
        assert code.text_content() == json.dumps(value, indent=2)
    finally:
        ui.close()
