"""The real page in headless Chromium: real Pyodide, real WebGPU (SwiftShader here), the real default model.

What a person sees: the model loads with progress, generation streams into the "Output" region and matches the
reference greedy continuation, Stop stops, bad model files give clear errors while the loaded model keeps working.

Two pages (each in its own context of conftest's ``browser``) are shared by the module's tests, since loading the
model takes tens of seconds: ``gpu_app`` on the page's WebGPU path (?backend=webgpu: the adapter shown, the kernels'
tokens equal to the reference) and ``app`` as a person opens it (backend 'auto', which on SwiftShader is the CPU
path, ~20x faster there) for the interface (Stop, bad files, errors). Every test leaves its page idle with the
default model loaded. The fixtures
``browser``, ``server_url`` and ``smollm2_gguf`` come from conftest.py; the reference continuations from
tests/fixtures/smollm2_reference.json (transformers, float32).

Every wait is generous (SwiftShader on two cores decodes about one token a second) but fails at once, with the
page's message and console, when the page shows an error instead.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect

REFERENCE = Path(__file__).parent / "fixtures" / "smollm2_reference.json"

# Generous: on a 2-core machine with SwiftShader, boot + download + upload + pipeline compile take tens of seconds,
# and each decode step is slow.
LOAD_MS = 600_000
GENERATE_MS = 600_000
ERROR_MS = 120_000

# Fake model URLs the tests fulfil themselves (page.route), so the server needs no test files.
FAKE_CORRUPT = "/fake/corrupt.gguf"
FAKE_TRUNCATED_TENSORS = "/fake/truncated-tensors.gguf"
FAKE_TRUNCATED_HEADER = "/fake/truncated-header.gguf"
CORRUPT_BYTES = b"This is not a model: just a few junk bytes.\n"


def _gguf_general_name(path: Path) -> str:
    """The model name as an independent GGUF reader (the `gguf` package) sees it."""
    gguf = pytest.importorskip("gguf")
    return str(gguf.GGUFReader(str(path)).fields["general.name"].contents())


def _header_size(path: Path) -> int:
    """Where tensor data starts, per the `gguf` package."""
    gguf = pytest.importorskip("gguf")
    return min(t.data_offset for t in gguf.GGUFReader(str(path)).tensors)


def _fulfil_with(body: bytes):
    def handler(route):
        route.fulfill(status=200, body=body, headers={"Content-Type": "application/octet-stream"})
    return handler


class App:
    """The loaded page and its controls, found by their accessible names."""

    def __init__(self, page):
        self.page = page
        self.console: list[str] = []
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        self.status = page.get_by_role("status")
        self.alert = page.get_by_role("alert")
        self.output = page.get_by_role("region", name="Output")
        self.prompt = page.get_by_label("Prompt", exact=True)
        self.max_tokens = page.get_by_label("Max tokens")
        self.chat = page.get_by_label("Chat template")
        self.generate_button = page.get_by_role("button", name="Generate")
        self.stop_button = page.get_by_role("button", name="Stop")
        self.model_url = page.get_by_label("Model URL")
        self.load_button = page.get_by_role("button", name="Load", exact=True)
        self.model_name = page.locator("#model-name")
        self.backend = page.locator("#backend")
        self.stats = page.locator("#stats")

    def diagnostics(self) -> str:
        error = self.page.locator(".error").all_text_contents()   # the alert role is absent while it is empty
        return (f"status={self.status.text_content()!r} error={error!r}\n"
                + "\n".join(self.console[-40:]))

    def wait_ready(self, timeout=LOAD_MS):
        try:
            expect(self.status).to_have_text(re.compile(r"Ready"), timeout=timeout)
            expect(self.page.locator("#generate")).to_be_enabled(timeout=10_000)   # Send or Generate, by mode
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.diagnostics()}") from None

    def generate(self, prompt: str, max_tokens: int, chat: bool):
        self.prompt.fill(prompt)
        self.max_tokens.fill(str(max_tokens))
        self.chat.set_checked(chat)
        self.generate_button.click()

    def wait_for(self, locator, timeout):
        """Wait until `locator` is visible, failing at once (with the message) if an error shows up instead."""
        try:
            expect(locator.or_(self.alert).first).to_be_visible(timeout=timeout)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.diagnostics()}") from None
        if self.alert.count() and not locator.count():
            raise AssertionError(f"the page shows an error: {self.alert.text_content()!r}\n{self.diagnostics()}")

    def wait_done(self, timeout=GENERATE_MS) -> str:
        """Wait for the run to finish; returns the stop reason the status shows."""
        self.wait_for(self.status.filter(has_text=re.compile(r"^Ready \(")), timeout)
        expect(self.stop_button).to_be_disabled()
        expect(self.generate_button).to_be_enabled()
        return re.match(r"^Ready \((.*)\)$", self.status.text_content()).group(1)

    def load_url(self, url: str):
        if self.page.locator("#drawer").get_attribute("open") is None:   # the model controls fold once one loaded
            self.page.get_by_text("Model and cache", exact=True).click()
        self.model_url.fill(url)
        self.load_button.click()


@pytest.fixture(scope="module")
def reference():
    if not REFERENCE.exists():
        pytest.fail(f"{REFERENCE} is missing (made by the reference script)")
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="module")
def bad_models(smollm2_gguf):
    """Bad model files by fake URL: junk bytes, and the default model cut short in two places."""
    model = Path(smollm2_gguf).read_bytes()
    header = _header_size(Path(smollm2_gguf))
    assert 1_000_000 < header < len(model) - 2_000_000
    return {
        FAKE_CORRUPT: CORRUPT_BYTES,
        FAKE_TRUNCATED_TENSORS: model[:header + 2_000_000],   # header whole, tensor data cut
        FAKE_TRUNCATED_HEADER: model[:1_000_000],             # cut inside the header (the vocabulary)
    }


def _open_app(browser, server_url, bad_models, query):
    """The page opened with ``query``, the default model loaded; fake model URLs routed to bad files."""
    context = browser.new_context()
    page = context.new_page()
    for path, body in bad_models.items():
        page.route(server_url + path, _fulfil_with(body))
    a = App(page)
    # Record every text the progress line and the status show (to check what loading displayed), and the type of
    # every message the page sends its worker (to check that nothing is sent when it should not be).
    page.add_init_script("""
        window.__sent = [];
        const post = Worker.prototype.postMessage;
        Worker.prototype.postMessage = function (msg, ...rest) {
          window.__sent.push(msg && msg.type);
          return post.call(this, msg, ...rest);
        };
        window.__seen = [];
        document.addEventListener('DOMContentLoaded', () => {
          for (const id of ['progress-text', 'status']) {
            const el = document.getElementById(id);
            new MutationObserver(() => window.__seen.push(el.textContent))
              .observe(el, {childList: true, characterData: true, subtree: true});
          }
        });
    """)
    page.goto(server_url + "/" + query)
    a.wait_ready()
    a.opened_in_chat = page.get_by_label("Chat", exact=True).is_checked()
    page.get_by_label("Raw completion").check()    # these tests drive the Prompt/Generate/Output flow
    yield a
    context.close()


@pytest.fixture(scope="module")
def gpu_app(browser, server_url, bad_models):
    """The page on its WebGPU path (?backend=webgpu; SwiftShader here), opened once: the page's kernels."""
    yield from _open_app(browser, server_url, bad_models, "?backend=webgpu")


@pytest.fixture(scope="module")
def app(browser, server_url, bad_models):
    """The page as a person opens it (backend 'auto': the CPU path on SwiftShader, ~20x faster there), opened once:
    the interface tests (Stop, bad files, errors) run on it."""
    yield from _open_app(browser, server_url, bad_models, "")


def _case(reference, name):
    """One prompt of the reference fixture (see tests/fixtures/make_reference.py for its format)."""
    return next(p for p in reference["prompts"] if p["name"] == name)


# A raw prompt whose 32 greedy tokens have no EOS and keep newlines and indentation, so the text must match exactly.
RAW_CASE = "raw_fibonacci"
# A chat prompt whose greedy answer ends with EOS (the engine stops there and does not show it).
CHAT_CASE = "chat_capital"


# -- (a) loading ------------------------------------------------------------------------------------------------


def test_page_loads_default_model_and_shows_adapter(gpu_app, smollm2_gguf):
    app = gpu_app
    page = app.page
    assert page.evaluate("window.__sent")[0] == "load"   # the default model loads on open, unasked
    expect(page).to_have_title(re.compile("cera_web"))
    # named as the menu names it (cera_web/names.py), not general.name verbatim; the file name is its title
    expect(app.model_name).to_have_text("SmolLM2 135M Instruct")
    assert _gguf_general_name(Path(smollm2_gguf)) != "SmolLM2 135M Instruct"
    expect(app.model_name).to_have_attribute("title", Path(smollm2_gguf).name)
    # The backend names the WebGPU adapter the page's browser offers (asked independently, from the page).
    info = page.evaluate("""async () => {
        const a = await navigator.gpu.requestAdapter();
        return a ? {vendor: a.info.vendor, architecture: a.info.architecture, description: a.info.description} : null;
    }""")
    assert info is not None, "the browser offers no WebGPU adapter to the page"
    backend = app.backend.text_content()
    words = [w for w in info.values() if w]
    assert words and any(w.lower() in backend.lower() for w in words), (backend, info)
    expect(page.get_by_label("Backend")).to_have_text("WebGPU")      # ?backend=webgpu: the top bar says so
    # Loading showed the download in bytes and percent, up to the whole file.
    seen = page.evaluate("window.__seen")
    total_mb = f"{Path(smollm2_gguf).stat().st_size / 1e6:.1f} MB"
    rate = r"( · [\d.]+ (MB|kB)/s)?"   # the rate, once the download has run for a moment
    assert any(re.fullmatch(rf"Downloading: [\d.]+ (MB|kB) of {re.escape(total_mb)} \(\d+%\){rate}", s)
               for s in seen), seen
    assert any(re.fullmatch(rf"Downloading: {re.escape(total_mb)} of {re.escape(total_mb)} \(100%\){rate}", s)
               for s in seen), seen
    expect(app.stop_button).to_be_disabled()
    assert app.opened_in_chat   # the default model is an instruct model: the page opened in chat mode
    expect(app.chat).not_to_be_checked()   # and a raw completion starts without the chat template
    expect(app.alert).to_have_count(0)   # the (empty) alert area is hidden


# -- (b) generation matches the reference ------------------------------------------------------------------------


@pytest.mark.slow   # 32 tokens at ~1 tok/s; the chat case below checks the page's tokens against the reference too
def test_raw_greedy_generation_matches_reference(gpu_app, reference):
    app = gpu_app
    case = _case(reference, RAW_CASE)
    assert case["eos_position"] is None and len(case["greedy_ids"]) == 32
    app.generate(case["prompt"], max_tokens=32, chat=False)
    expect(app.stop_button).to_be_enabled()     # Stop is live while generating
    assert app.wait_done() == "max tokens reached"
    expect(app.alert).to_have_count(0)   # the (empty) alert area is hidden
    assert app.output.text_content() == case["greedy_text"]
    stats = app.stats.text_content()
    assert re.search(rf"Prefill: [\d.]+ tok/s \({len(case['prompt_ids'])} tokens, \d+ ms\)", stats), stats
    assert re.search(r"Decode: [\d.]+ tok/s \(32 tokens, \d+ ms\)", stats), stats


def test_chat_generation_matches_reference(gpu_app, reference):
    """The Chat template box wraps the prompt as one user turn of the model's template (with its system prompt)."""
    app = gpu_app
    case = _case(reference, CHAT_CASE)
    assert [m["role"] for m in case["messages"]] == ["user"] and case["eos_position"] is not None
    app.generate(case["messages"][0]["content"], max_tokens=32, chat=True)
    assert app.wait_done() == "end of text"
    # The reference text runs on past EOS; the page shows the answer up to it.
    answer = case["greedy_text"].split("<|im_end|>")[0]
    assert app.output.text_content() == answer
    stats = app.stats.text_content()
    assert re.search(rf"Prefill: [\d.]+ tok/s \({len(case['prompt_ids'])} tokens", stats), stats
    assert re.search(rf"Decode: [\d.]+ tok/s \({case['eos_position']} tokens", stats), stats


# -- (c) Stop -----------------------------------------------------------------------------------------------------


def test_stop_ends_a_long_generation_and_the_page_generates_again(app, reference):
    app.generate(_case(reference, "raw_story")["prompt"], max_tokens=4000, chat=False)
    # Tokens stream in while the run goes on.
    app.wait_for(app.output.filter(has_text=re.compile(r"\S")), GENERATE_MS)
    expect(app.stop_button).to_be_enabled()
    # The page stays responsive while the worker generates.
    t0 = time.monotonic()
    app.page.evaluate("1 + 1")
    assert time.monotonic() - t0 < 2.0
    app.stop_button.click()
    assert app.wait_done(timeout=120_000) == "stopped"
    stopped_text = app.output.text_content()
    m = re.search(r"Decode: .*\((\d+) tokens", app.stats.text_content())
    assert m and 0 < int(m.group(1)) < 4000, app.stats.text_content()
    time.sleep(1.0)
    assert app.output.text_content() == stopped_text, "tokens kept arriving after Stop"

    # A new run works and is not cancelled at once by the earlier Stop.
    _generate_reference_prefix(app, reference)


def _generate_reference_prefix(app, reference, n=4):
    """A short raw run of the reference prompt: its text is the start of the reference continuation."""
    case = _case(reference, RAW_CASE)
    app.generate(case["prompt"], max_tokens=n, chat=False)
    assert app.wait_done() == "max tokens reached"
    expect(app.alert).to_have_count(0)
    out = app.output.text_content()
    assert out.strip() and case["greedy_text"].startswith(out), (out, case["greedy_text"])
    assert re.search(rf"Decode: .*\({n} tokens", app.stats.text_content()), app.stats.text_content()


# -- (d, e) bad model files ----------------------------------------------------------------------------------------


def _load_bad_model_then_generate(app, reference, url, *needles):
    name_before = app.model_name.text_content()
    app.load_url(url)
    try:
        expect(app.alert).to_have_attribute("data-kind", "GGUFFormatError", timeout=ERROR_MS)
        expect(app.alert).to_contain_text("This is not a usable model file: ")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{app.diagnostics()}") from None
    for needle in needles:
        expect(app.alert).to_contain_text(needle)
    # The model loaded before stays in use and the page stays usable.
    expect(app.model_name).to_have_text(name_before)
    expect(app.status).to_contain_text("still using")
    expect(app.generate_button).to_be_enabled()
    expect(app.load_button).to_be_enabled()
    _generate_reference_prefix(app, reference)


def test_corrupt_gguf_shows_error_and_keeps_the_model(app, reference):
    _load_bad_model_then_generate(app, reference, FAKE_CORRUPT, "not a GGUF file", "corrupt.gguf")


@pytest.mark.parametrize("url", [FAKE_TRUNCATED_TENSORS, FAKE_TRUNCATED_HEADER])
def test_truncated_gguf_shows_error_and_keeps_the_model(app, reference, url):
    _load_bad_model_then_generate(app, reference, url, "truncated")


def test_missing_model_url_shows_download_error(app):
    app.load_url("/models/no-such-model.gguf")
    expect(app.alert).to_have_attribute("data-kind", "DownloadError", timeout=ERROR_MS)
    expect(app.alert).to_contain_text("The download failed: ")
    expect(app.alert).to_contain_text("404")
    app.wait_ready(timeout=10_000)


# -- (f) empty prompt -------------------------------------------------------------------------------------------


def test_empty_prompt_shows_a_message_and_sends_nothing(app):
    before = app.output.text_content()
    sent = app.page.evaluate("window.__sent.length")
    app.prompt.fill("   \n ")
    app.generate_button.click()
    expect(app.alert).to_contain_text("prompt is empty")
    # Nothing was sent to the worker or started: the output is as it was and the status never left Ready.
    assert app.page.evaluate("(n) => window.__sent.slice(n)", sent) == []
    expect(app.status).to_have_text(re.compile(r"^Ready"))
    assert app.output.text_content() == before
    expect(app.stop_button).to_be_disabled()
    expect(app.prompt).to_be_focused()


# -- no WebGPU ----------------------------------------------------------------------------------------------------


# -- the worker's Python glue, in CPython (no browser, no GPU: these paths fail before a device is needed) ---------


def _run_glue(coro_fn, *args):
    """Run a webapp coroutine, collecting the messages it posts. In a thread of its own: sync Playwright keeps an
    event loop running in this one once the browser fixture has started."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from cera_web import webapp
    sent = []
    webapp.init(sent.append)
    with ThreadPoolExecutor(1) as pool:
        ok = pool.submit(asyncio.run, coro_fn(*args)).result()
    return ok, [json.loads(s) for s in sent]


@pytest.mark.parametrize("url", [FAKE_CORRUPT, FAKE_TRUNCATED_HEADER, FAKE_TRUNCATED_TENSORS])
def test_glue_reports_bad_gguf_as_an_error_message(bad_models, url):
    from cera_web import webapp
    from cera_web.source import BytesSource
    ok, msgs = _run_glue(webapp.load_source, BytesSource(bad_models[url], "bad.gguf"))
    assert ok is False
    errors = [m for m in msgs if m["type"] == "error"]
    assert len(errors) == 1 and errors[0]["kind"] == "GGUFFormatError" and errors[0]["during"] == "load", msgs
    assert "bad.gguf" in errors[0]["message"]
    assert not any(m["type"] == "ready" for m in msgs)


def test_glue_generate_without_a_model_is_an_input_error():
    from cera_web import webapp
    ok, msgs = _run_glue(webapp.generate, "Hello", 8, False)
    assert ok is False
    assert msgs == [{"type": "error", "id": None, "kind": "InputError", "during": "generate",
                     "message": msgs[0]["message"], "error_type": "invalid_request_error", "param": None}]
    assert "no model is loaded" in msgs[0]["message"]
    assert webapp.cancel() is False   # nothing running: a no-op, not an error
