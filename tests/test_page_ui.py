"""The chat-first page in headless Chromium (real Pyodide, WebGPU on SwiftShader), mostly with a tiny random model
(tests/fixtures/small/qwen3-q8_0.gguf, routed at /fake/qwen3.gguf) so that each test takes seconds, not minutes.

- the model menu lists the served models (serve.py's /models/index.json: assets.json's models present on disk) with
  size and cache state, and loads the one picked; the menu names models from their GGUF headers, the model panel
  by its file
- chat is the default mode for a model with a chat template; a base model (no template) opens in raw completion
- the system prompt reaches the template: the page's prompt ids and reply equal a native ChatSession's with it
- Markdown replies are DOM nodes: model text with <script> or <img onerror=...> is shown as text and never runs;
  code blocks get a Copy button
- each reply shows its tokens, tok/s and seed; clicking the seed puts it in Settings and the next run repeats it
- errors appear next to what caused them, without Python class names; status and progress never go stale
- a phone (390x844) and a laptop (1280x800) screenshot, each with the document exactly as wide as the viewport;
  the dark theme follows prefers-color-scheme

Screenshots go to $CERA_SCREENSHOTS when set (else pytest's tmp_path), for a person to look at.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import threading
from pathlib import Path

import pytest

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "tests" / "fixtures" / "small"
TINY = SMALL / "qwen3-q8_0.gguf"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
LOAD_MS = 600_000
GENERATE_MS = 300_000

# Records every message the page's worker sends it (window.__received), before app.js makes its worker.
RECORD_WORKER = """
    window.__received = [];
    const RealWorker = window.Worker;
    window.Worker = class extends RealWorker {
      constructor(...args) {
        super(...args);
        this.addEventListener('message', (e) => window.__received.push(e.data));
      }
    };
"""


def _in_thread(fn):
    out = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as e:   # noqa: BLE001 - handed back to the test
            out["error"] = e

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _without_template(data: bytes) -> bytes:
    """The GGUF with its tokenizer.chat_template key renamed (same length: the file stays valid), as a base model."""
    key = b"tokenizer.chat_template"
    assert data.count(key) == 1
    return data.replace(key, b"tokenizer.xxxx_template")


def _serve(body: bytes):
    def handler(route):
        route.fulfill(status=200, body=body, headers={"Content-Type": "application/octet-stream"})
    return handler


class UI:
    def __init__(self, browser, server_url, query="?model=/fake/qwen3.gguf", body=None, routes=None, **context_args):
        self.context = browser.new_context(**context_args)
        self.page = page = self.context.new_page()
        self.console: list[str] = []
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        page.add_init_script(RECORD_WORKER)
        page.route(f"{server_url}/fake/qwen3.gguf", _serve(body or TINY.read_bytes()))
        for path, handler in (routes or {}).items():      # more of the site, as a test wants it
            page.route(server_url + path, handler)
        self.status = page.get_by_role("status")
        self.alert = page.get_by_role("alert")
        self.log = page.get_by_role("log", name="Conversation")
        self.message = page.get_by_label("Message", exact=True)
        self.send = page.get_by_role("button", name="Send", exact=True)
        page.goto(server_url + "/" + query)

    def close(self):
        self.context.close()

    def diagnostics(self):
        return (f"status={self.status.text_content()!r} errors={self.page.locator('.error').all_text_contents()!r}\n"
                + "\n".join(self.console[-30:]))

    def wait(self, pattern=r"^Ready", timeout=LOAD_MS):
        """Wait for the status to match ``pattern``; fail at once if loading fails instead."""
        try:
            expect(self.status).to_have_text(re.compile(f"{pattern}|^Loading failed"), timeout=timeout)
            expect(self.status).to_have_text(re.compile(pattern), timeout=1)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.diagnostics()}") from None

    def setting(self, label):
        if self.page.locator("#settings").get_attribute("open") is None:
            self.page.get_by_text("Settings", exact=True).click()
        return self.page.get_by_label(label, exact=True)

    def say(self, text, max_tokens):
        self.page.get_by_label("Max tokens").fill(str(max_tokens))
        self.message.fill(text)
        self.send.click()
        self.wait(r"^Ready \(", GENERATE_MS)

    def raw(self, prompt, max_tokens):
        """Set up a raw completion of ``prompt``: exactly max_tokens tokens (end of turn ignored)."""
        self.page.get_by_label("Raw completion").check()
        self.page.get_by_label("Prompt", exact=True).fill(prompt)
        self.page.get_by_label("Max tokens").fill(str(max_tokens))
        self.setting("Ignore end of turn").check()

    def generate(self):
        """Run the raw completion as set up; its 'done' message."""
        self.page.get_by_role("button", name="Generate").click()
        self.wait(r"^Ready \(", GENERATE_MS)
        return self.received("done")[-1]

    def received(self, kind):
        return [m for m in self.page.evaluate("window.__received") if m["type"] == kind]

    def page_width(self):
        return self.page.evaluate("[document.documentElement.scrollWidth, document.body.scrollWidth, innerWidth]")


def _screenshot(page, name, tmp_path):
    folder = Path(os.environ.get("CERA_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / name), full_page=True)


# -- CPython: the menu's list ------------------------------------------------------------------------------------------

def test_models_index_lists_the_model_assets_present_on_disk(tmp_path):
    import serve
    (tmp_path / ".assets" / "models").mkdir(parents=True)
    (tmp_path / ".assets" / "models" / "a.gguf").write_bytes(b"x" * 1234)
    (tmp_path / ".assets" / "models" / "joined.gguf").write_bytes(b"y" * 77)
    (tmp_path / "assets.json").write_text(json.dumps({"default_model": "a", "assets": [
        {"name": "pyodide", "path": ".assets/pyodide"},
        {"name": "a", "about": "model A", "path": ".assets/models/a.gguf"},
        {"name": "missing", "path": ".assets/models/missing.gguf"},
        {"name": "multi", "parts": [{"file": "p1"}, {"file": "p2"}], "path": ".assets/models/joined.gguf",
         "draft": "a"},
        {"name": "b", "path": ".assets/models/a.gguf", "draft": "missing"},      # a draft not on disk: none
    ]}))
    assert json.loads(serve.models_index(tmp_path)) == {"models": [
        {"name": "a", "file": "a.gguf", "url": "/models/a.gguf", "size": 1234, "about": "model A", "default": True},
        {"name": "multi", "file": "joined.gguf", "url": "/models/joined.gguf", "size": 77, "about": "",
         "default": False, "draft": "/models/a.gguf"},
        {"name": "b", "file": "a.gguf", "url": "/models/a.gguf", "size": 1234, "about": "", "default": False}]}


def test_models_index_is_served(server_url):
    from urllib.request import urlopen
    with urlopen(server_url + "/models/index.json") as r:
        models = json.loads(r.read())["models"]
    smol = next(m for m in models if m["file"] == DEFAULT_FILE)
    assert smol["size"] == (ROOT / ".assets" / "models" / DEFAULT_FILE).stat().st_size and smol["default"]


# -- the page ------------------------------------------------------------------------------------------------------

@pytest.mark.browser
def test_menu_chat_default_and_base_model_raw(browser, server_url):
    ui = UI(browser, server_url, query="")     # the default model
    try:
        ui.wait()
        page = ui.page
        size = (ROOT / ".assets" / "models" / DEFAULT_FILE).stat().st_size
        menu = page.get_by_label("Model", exact=True)
        # the served model, with its size and (downloaded just now) cache state; selected, as it is the loaded one
        # named from its header (tests/test_model_names.py), the file name its title
        expect(menu.locator("option:checked")).to_have_text(f"SmolLM2 135M Instruct · {size / 1e6:.1f} MB · cached")
        expect(menu.locator("option:checked")).to_have_attribute("title", DEFAULT_FILE)
        expect(page.locator("#model-state")).to_have_text(f"{size / 1e6:.1f} MB · cached")   # also beside the menu
        expect(page.locator("#model-name")).to_have_text("SmolLM2 135M Instruct")   # as the menu names it
        expect(page.locator("#model-name")).to_have_attribute("title", DEFAULT_FILE)
        # the adapter here is SwiftShader, a software fallback: by default the page takes its faster CPU path, and
        # the top bar says so
        backend = page.get_by_label("Backend")
        expect(backend).to_have_text("CPU")
        expect(backend).to_have_attribute("title", re.compile(r"software fallback.*CPU \(numpy reference\)$"))
        expect(page.locator("#backend")).to_have_text("CPU (numpy reference)")
        expect(page.locator("#drawer")).not_to_have_attribute("open", "")   # controls folded once it loaded
        expect(page.locator("#progress-row")).to_be_hidden()                 # no stale progress
        # chat is the default for a model with a chat template
        expect(page.get_by_label("Chat", exact=True)).to_be_checked()
        expect(ui.message).to_be_visible()
        expect(ui.send).to_be_enabled()
        # raw completion starts without the template ticked
        page.get_by_label("Raw completion").check()
        expect(page.get_by_label("Chat template")).not_to_be_checked()
        assert ui.received("ready")[-1]["chat_template"] is True
    finally:
        ui.close()

    ui = UI(browser, server_url, body=_without_template(TINY.read_bytes()))   # a base model
    try:
        ui.wait()
        page = ui.page
        expect(page.get_by_label("Raw completion")).to_be_checked()
        expect(page.get_by_label("Chat", exact=True)).to_be_disabled()
        expect(page.get_by_label("Prompt", exact=True)).to_be_visible()
        expect(page.get_by_role("button", name="Generate")).to_be_enabled()
        expect(page.get_by_label("Chat template")).not_to_be_checked()
        expect(page.locator("#mode-hint")).to_have_text("This model has no chat template: it continues text.")
        # the menu: the served default model (not cached in this fresh context) and the loaded one, named from their
        # headers (this one's server ignores Range: read from its start)
        options = page.get_by_label("Model", exact=True).locator("option")
        expect(options.nth(0)).to_have_text("tiny random qwen3 167K Base")
        expect(options.nth(1)).to_have_text(re.compile(r"^SmolLM2 135M Instruct · [\d.]+ MB · download$"))
        texts = options.all_text_contents()
        # a model over 200 MB asks before it is downloaded; declined, nothing loads and the menu shows the loaded one
        big = [t for t in texts if re.search(r" · ([2-9]\d\d|\d{4,})\.\d MB · download$", t)]
        if big:     # the optional real checkpoints are served (tests/run.py fetches them)
            asked = []
            page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
            page.get_by_label("Model", exact=True).select_option(label=big[0])
            expect(page.get_by_label("Model", exact=True).locator("option:checked")).to_have_text(
                "tiny random qwen3 167K Base")
            assert asked and asked[0].startswith(f"Download {big[0].split(' · ')[0]} ("), asked
            expect(ui.status).to_have_text("Ready")
        expect(page.locator("#model-name")).to_have_text("tiny random qwen3 167K Base")
        expect(page.locator("#model-name")).to_have_attribute("title", "qwen3.gguf")
    finally:
        ui.close()


def _native_turn(system: str, text: str, n: int):
    from cera_web.engine import ChatSession, Engine

    async def run():
        engine = await Engine.load(str(TINY), context_size=2048, cpu_fallback=False)
        try:
            chat = ChatSession(engine, system=system)
            r = await chat.send(text, max_tokens=n, temperature=0, ignore_eos=True)
            plain = engine.encode_chat([{"role": "user", "content": text}])
            return r.prompt_tokens, r.text, plain
        finally:
            engine.close()

    return _in_thread(lambda: asyncio.run(run()))


@pytest.mark.browser
def test_system_prompt_reaches_the_template(browser, server_url):
    system, text, n = "You are a terse pirate.", "hello there", 4
    ids, reply, plain = _native_turn(system, text, n)
    assert len(ids) > len(plain)
    ui = UI(browser, server_url)
    try:
        ui.wait()
        ui.setting("System prompt").fill(system)
        ui.setting("Temperature").fill("0")
        ui.setting("Ignore end of turn").check()
        ui.say(text, n)
        done = ui.received("done")[-1]
        assert done["prompt_tokens"] == ids and done["text"] == reply
        assert [m["role"] for m in done["messages"]] == ["system", "user", "assistant"]
        assert done["messages"][0]["content"] == system
        # the stats count the prompt tokens processed: all of them on a first turn
        expect(ui.page.locator("#stats")).to_contain_text(f"({len(ids)} tokens")
        expect(ui.page.locator("#stats")).to_contain_text(re.compile(r" · First token after \d+\.\d\d s$"))
        # the prompt's progress came in chunks (16 tokens a pass on the CPU path): from 0 up, never past the total
        progress = [(m["done"], m["total"]) for m in ui.received("prompt")]
        assert len(ids) > 16 and progress[0] == (0, len(ids)) and progress[1] == (16, len(ids)), progress
        assert all(t == len(ids) and a < b < t for (a, t), (b, _) in zip(progress, progress[1:])), progress
        # a second turn prefills only the new tokens; the stats say so and name the reused ones. Typed as a person
        # would: Shift+Enter adds a line, an Enter that ends an IME composition is the IME's, Enter sends.
        expect(ui.message).to_have_attribute("placeholder", "Type a message; Enter sends it, Shift+Enter adds a line.")
        ui.page.get_by_label("Max tokens").fill("2")
        ui.message.fill("more")
        ui.message.press("Shift+Enter")
        ui.message.press_sequentially("lines")
        ui.message.evaluate("""(m) => m.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', isComposing: true,
                                                                                  bubbles: true, cancelable: true}))""")
        expect(ui.message).to_have_value("more\nlines")
        assert len(ui.received("done")) == 1 and ui.status.text_content().startswith("Ready (")
        ui.message.press("Enter")
        ui.wait(r"^Ready \(", GENERATE_MS)
        expect(ui.message).to_have_value("")
        done = ui.received("done")[-1]
        assert done["messages"][3] == {"role": "user", "content": "more\nlines"}
        assert done["cached_tokens"] > len(ids)
        new = len(done["prompt_tokens"]) - done["cached_tokens"]
        expect(ui.page.locator("#stats")).to_contain_text(f"({new} tokens, ")
        assert ui.received("prompt")[-1]["total"] == new
        expect(ui.page.locator("#stats")).to_contain_text(f", {done['cached_tokens']} more from the cache")
        # Clear: status back to plain Ready, no stale stop reason
        ui.page.get_by_role("button", name="Clear", exact=True).click()
        expect(ui.status).to_have_text("Ready")
        # a raw prompt is text: Enter adds a line, Ctrl+Enter generates
        ui.page.get_by_label("Raw completion").check()
        prompt = ui.page.get_by_label("Prompt", exact=True)
        prompt.fill("one")
        prompt.press("Enter")
        expect(prompt).to_have_value("one\n")
        assert len(ui.received("done")) == 2
        prompt.press("Control+Enter")
        ui.wait(r"^Ready \(", GENERATE_MS)
        assert len(ui.received("done")) == 3 and ui.received("done")[-1]["text"]
    finally:
        ui.close()


HOSTILE = ("Here is **bold**, *it*, `x<y`.\n\n<script>window.__pwned = 1</script>\n"
           "<img src=x onerror=\"window.__pwned = 2\">\n\n```html\n<b onmouseover=alert(1)>hi</b>\n```\n- one\n- two\n\n"
           "See [the guide](https://cera.test/guide?a=1), [mail](mailto:team@cera.test), "
           "[no](javascript:window.__pwned=3) and [rel](/relative).\n\n"
           "| name | *size* |\n|:-----|------:|\n| a \\| b | 1 |\n| c | 22 |\nafter")


@pytest.mark.browser
def test_markdown_replies_are_built_as_text_never_html(browser, server_url):
    ui = UI(browser, server_url)
    ui.context.grant_permissions(["clipboard-read", "clipboard-write"])
    try:
        ui.wait()
        page = ui.page
        # A reply streamed through the page's own message handler, token by token, as the worker sends it.
        page.evaluate("""(text) => {
            startRun('chat');
            for (const piece of text.match(/[\\s\\S]{1,3}/g)) worker.onmessage({data: {type: 'token', id: 0, text: piece}});
        }""", HOSTILE)
        content = ui.log.locator(".turn").last.locator(".content")
        expect(content.locator("strong")).to_have_text("bold")
        page.evaluate("""(text) => worker.onmessage({data: {type: 'done', mode: 'chat', text, stop_reason: 'eos',
            prompt_tokens: [1, 2], tokens: [3, 4, 5], cached_tokens: 0, seed: '42', prefill_tok_s: 1, decode_tok_s: 2,
            prefill_ms: 1, decode_ms: 1, memory: null,
            messages: [{role: 'user', content: 'hi'}, {role: 'assistant', content: text}]}})""", HOSTILE)
        reply = ui.log.locator(".turn").last
        content = reply.locator(".content")
        expect(content.locator("strong")).to_have_text("bold")
        expect(content.locator("p em")).to_have_text("it")
        expect(content.locator("p code")).to_have_text("x<y")
        expect(content.locator("li")).to_have_text(["one", "two"])
        # links: http(s) and mailto only, in a new tab without opener or referrer; other URLs stay as typed
        links = content.locator("a")
        expect(links).to_have_text(["the guide", "mail"])
        assert [links.nth(i).get_attribute("href") for i in range(2)] == ["https://cera.test/guide?a=1",
                                                                          "mailto:team@cera.test"]
        assert links.first.get_attribute("rel") == "noopener noreferrer" and links.first.get_attribute("target") == "_blank"
        expect(content).to_contain_text("[no](javascript:window.__pwned=3) and [rel](/relative).")
        # a pipe table, with its alignment, an escaped pipe and inline Markdown in a cell; the line after it is text
        expect(content.locator("table th")).to_have_text(["name", "size"])
        expect(content.locator("table th em")).to_have_text("size")
        expect(content.locator("table tbody tr")).to_have_count(2)
        expect(content.locator("table td")).to_have_text(["a | b", "1", "c", "22"])
        assert content.locator("table td").nth(1).evaluate("(c) => c.style.textAlign") == "right"
        # the HTML in the reply is text: shown as typed, no elements made, nothing ran
        text = content.text_content()
        assert "<script>window.__pwned = 1</script>" in text and '<img src=x onerror="window.__pwned = 2">' in text
        assert content.locator("script, img, b").count() == 0
        assert page.evaluate("window.__pwned") is None
        code = content.locator("pre code")
        expect(code).to_have_text("<b onmouseover=alert(1)>hi</b>")
        content.get_by_role("button", name="Copy code").click()
        assert page.evaluate("navigator.clipboard.readText()") == "<b onmouseover=alert(1)>hi</b>"
        expect(reply.locator(".turn-meta")).to_have_text("3 tokens · 2.0 tok/s · seed 42 · Copy")
        reply.get_by_role("button", name="Copy reply").click()
        assert page.evaluate("navigator.clipboard.readText()") == HOSTILE
        # a long streaming reply: the conversation follows it to its end
        page.evaluate("""() => {
            startRun('chat');
            for (let i = 0; i < 120; i++) worker.onmessage({data: {type: 'token', id: 0, text: `line ${i}\\n`}});
        }""")
        expect(ui.log.locator(".turn").last).to_contain_text("line 119")
        page.wait_for_function("() => { const c = document.getElementById('conversation');"
                               " return c.scrollHeight > 2 * c.clientHeight"
                               " && c.scrollHeight - c.scrollTop - c.clientHeight < 2; }", timeout=5_000)
        # a reply without Markdown keeps exactly its text
        assert page.evaluate("(t) => { const d = document.createElement('div');"
                             " d.append(CeraMarkdown.render(t)); return d.textContent; }",
                             "  plain\nlines\n\n\nand 2 * 3 = 6\n") == "  plain\nlines\n\n\nand 2 * 3 = 6\n"
    finally:
        ui.close()


@pytest.mark.browser
def test_conversations_are_kept_edited_and_continued(browser, server_url):
    """A cut reply is continued in its own turn; an edited message replaces the turns from it; the conversation is
    kept in the browser: a reload restores it (and the worker continues it), "New chat" starts another, the menu
    switches between them, a model load keeps the one shown, Rename and Delete work."""
    ui = UI(browser, server_url, query="?model=/fake/qwen3.gguf&mode=chat")
    page = ui.page
    page.on("dialog", lambda d: d.accept("Trip") if d.type == "prompt" else d.accept())
    turns = ui.log.locator(".turn .content")
    menu = page.get_by_label("Conversations")
    try:
        ui.wait()
        ui.setting("Temperature").fill("0")
        ui.setting("Ignore end of turn").check()
        ui.say("hello", 3)
        cut = ui.received("done")[-1]["messages"][1]["content"]
        # Continue: the reply goes on in the same turn
        page.get_by_role("button", name="Continue this reply").click()
        ui.wait(r"^Ready \(", GENERATE_MS)
        longer = ui.received("done")[-1]["messages"]
        assert len(longer) == 2 and longer[1]["content"].startswith(cut) and len(longer[1]["content"]) > len(cut)
        expect(turns).to_have_text(["hello", re.compile(".+")])
        # Edit the first message: the composer gets its text; sending replaces it and what followed
        page.get_by_role("button", name="Edit message 1").click()
        expect(ui.message).to_have_value("hello")
        expect(page.locator("#editing")).to_be_visible()
        ui.message.fill("hi there")
        ui.message.press("Enter")
        ui.wait(r"^Ready \(", GENERATE_MS)
        done = ui.received("done")[-1]
        assert [m["content"] for m in done["messages"]][:1] == ["hi there"] and len(done["messages"]) == 2
        expect(page.locator("#editing")).to_be_hidden()
        ui.say("more", 2)
        expect(turns).to_have_count(4)
        kept = [t for t in turns.all_text_contents()]
        # a reload restores it; the worker has it too (the next turn's messages start with it)
        page.reload()
        ui.wait()
        expect(turns).to_have_text(kept)
        expect(menu.locator("option:checked")).to_have_text("hello · 4 messages")   # titled by its first message
        ui.setting("Temperature").fill("0")
        ui.say("again", 2)
        done = ui.received("done")[-1]
        assert [m["content"] for m in done["messages"][:4]] == kept and len(done["messages"]) == 6
        # another conversation, then back to the first
        page.get_by_role("button", name="New chat").click()
        expect(turns).to_have_count(0)
        ui.say("fresh start", 2)
        expect(menu.locator("option")).to_have_text(["New chat", "fresh start · 2 messages", "hello · 6 messages"])
        menu.select_option(label="hello · 6 messages")
        expect(turns).to_have_count(6)
        # loading a model keeps the conversation shown
        page.locator("#drawer > summary").click()
        page.get_by_label("Model URL").fill("/fake/qwen3.gguf")
        page.get_by_role("button", name="Load", exact=True).click()
        ui.wait(r"^Ready$")
        expect(turns).to_have_count(6)
        # rename, delete
        page.get_by_role("button", name="Rename conversation").click()
        expect(menu.locator("option:checked")).to_have_text("Trip · 6 messages")
        page.get_by_role("button", name="Delete conversation").click()
        expect(turns).to_have_count(0)
        expect(menu.locator("option")).to_have_text(["New chat", "fresh start · 2 messages"])
    finally:
        ui.close()


@pytest.mark.browser
def test_seed_is_shown_and_reusable(browser, server_url):
    ui = UI(browser, server_url)
    try:
        ui.wait()
        page = ui.page
        ui.setting("Ignore end of turn").check()
        ui.say("tell me something", 5)        # sampled (chat defaults: temperature 0.7), a fresh seed
        done = ui.received("done")[-1]
        seed, first = done["seed"], done["text"]
        assert seed and seed.isdigit()
        meta = ui.log.locator(".turn").last.locator(".turn-meta")
        expect(meta).to_contain_text("5 tokens · ")
        expect(meta).to_contain_text(f"seed {seed}")
        meta.get_by_role("button", name=f"Use seed {seed}").click()
        expect(ui.setting("Seed")).to_have_value(seed)
        page.get_by_role("button", name="Regenerate", exact=True).click()
        ui.wait(r"^Ready \(", GENERATE_MS)
        again = ui.received("done")[-1]
        assert again["seed"] == seed and again["text"] == first and again["tokens"] == done["tokens"]
        # raw completion shows the seed in the stats line too
        page.get_by_label("Raw completion").check()
        page.get_by_label("Prompt", exact=True).fill("Once")
        ui.setting("Temperature").fill("1")
        ui.setting("Seed").fill("")
        page.get_by_role("button", name="Generate").click()
        ui.wait(r"^Ready \(", GENERATE_MS)
        raw = ui.received("done")[-1]
        expect(page.locator("#stats").get_by_role("button", name=f"Use seed {raw['seed']}")).to_be_visible()
    finally:
        ui.close()


FOX = "The quick brown fox jumps over the lazy dog. The quick brown fox"


def _same_tokens_fewer_passes(page, spec, plain, n):
    """A speculative run's 'done' against a plain one's: drafts counted, the same n tokens, and the stats line of the
    plain run (shown last) says nothing of drafts."""
    assert spec["drafted"] > 0 and plain["drafted"] == 0
    assert spec["tokens"] == plain["tokens"] and len(spec["tokens"]) == n
    expect(page.locator("#stats")).not_to_contain_text("Speculative")


@pytest.mark.browser
def test_speculative_setting_gives_the_same_reply_and_says_what_it_kept(browser, server_url):
    """The settings' "Speculative decoding" (prompt lookup here: no draft model is served) reaches the engine: a
    greedy raw completion gives the same tokens as with it off, and the stats line says how many drafts were kept.
    (A prompt whose completion starts with one of its tokens: lookup's first round, before any evidence, drafts there;
    later rounds need its drafts to have been kept, which the tiny random model rarely gives.)"""
    ui = UI(browser, server_url)
    try:
        ui.wait()
        page = ui.page
        ui.raw("hello world hello world hello world", 24)
        runs = []
        for mode in ("lookup", "off"):
            ui.setting("Speculative decoding").fill(mode)
            runs.append(ui.generate())
            if mode == "lookup":
                expect(page.locator("#stats")).to_contain_text(
                    f"Speculative: {runs[0]['accepted']} of {runs[0]['drafted']} drafted tokens accepted")
        _same_tokens_fewer_passes(page, *runs, 24)
    finally:
        ui.close()


@pytest.mark.browser
def test_a_served_draft_model_speeds_up_the_loaded_one(browser, server_url):
    """A served model whose index entry names a draft model offers "Speed up with …": checked, the draft model is
    downloaded and loaded (a 'draft' message), greedy replies are the same tokens and say how many drafts were kept;
    unchecked, it is dropped. (The pair: the tiny qwen3 fixture in f32, drafted for by its q8_0 twin.)"""
    index = {"models": [
        {"name": "tiny", "file": "qwen3.gguf", "url": "/fake/qwen3.gguf", "size": (SMALL / "qwen3-f32.gguf").stat().st_size,
         "about": "", "default": True, "draft": "/fake/qwen3-draft.gguf"},
        {"name": "tiny-draft", "file": "qwen3-draft.gguf", "url": "/fake/qwen3-draft.gguf",
         "size": TINY.stat().st_size, "about": "", "default": False}]}
    ui = UI(browser, server_url, body=(SMALL / "qwen3-f32.gguf").read_bytes(), routes={
        "/fake/qwen3-draft.gguf": _serve(TINY.read_bytes()),
        "/models/index.json": lambda route: route.fulfill(status=200, body=json.dumps(index),
                                                          headers={"Content-Type": "application/json"})})
    try:
        page = ui.page
        ui.wait()
        page.locator("#drawer > summary").click()
        box = page.get_by_label("Speed up with", exact=False)
        expect(box).to_be_visible()
        box.check()
        expect(ui.status).to_have_text("Ready", timeout=LOAD_MS)
        assert ui.received("draft")[-1]["file"] == "qwen3-draft.gguf"
        ui.raw(FOX, 20)
        runs = []
        for use in (True, False):
            if not use:
                if page.locator("#drawer").get_attribute("open") is None:
                    page.locator("#drawer > summary").click()
                box.uncheck()
                expect(ui.status).to_have_text("Ready")
                expect(box).to_be_enabled()     # the worker's answer re-enables it (the status says Ready at once)
                assert ui.received("draft")[-1]["name"] is None
            runs.append(ui.generate())
        _same_tokens_fewer_passes(page, *runs, 20)
    finally:
        ui.close()


@pytest.mark.browser
def test_errors_show_next_to_their_cause_without_class_names(browser, server_url, tmp_path):
    ui = UI(browser, server_url)
    try:
        ui.wait()
        page = ui.page
        # a file that is not a model, picked: the error is at the top, by the model controls
        bad = tmp_path / "notes.gguf"
        bad.write_bytes(b"These are notes, not a model.\n" * 10)
        page.locator("#drawer > summary").click()
        page.get_by_label("Model file").set_input_files(str(bad))
        alert = page.locator("#load-error")
        expect(alert).to_have_attribute("data-kind", "GGUFFormatError", timeout=LOAD_MS)
        expect(alert).to_contain_text("This is not a usable model file: ")
        expect(alert).to_contain_text("notes.gguf")
        assert "Error" not in alert.text_content()
        menu_box = page.get_by_label("Model", exact=True).bounding_box()
        box = alert.bounding_box()
        assert 0 < box["y"] - (menu_box["y"] + menu_box["height"]) < 150, (box, menu_box)
        # the model still loaded is named as the rest of the page names it (its display name)
        expect(ui.status).to_contain_text("still using tiny random qwen3 167K Instruct.")
        expect(page.locator("#progress-row")).to_be_hidden()
        # a bad setting: the error is by the message box, and the load error is gone
        ui.setting("Top-p").fill("2")
        ui.message.fill("hi")
        ui.send.click()
        run_error = page.locator("#error")
        expect(run_error).to_have_text("Check the input: top_p must be between 0.0 and 1.0, got 2")
        expect(run_error).to_have_attribute("data-kind", "InputError")
        expect(ui.alert).to_have_count(1)
        gap = ui.message.bounding_box()["y"] - (run_error.bounding_box()["y"] + run_error.bounding_box()["height"])
        assert 0 <= gap < 60, gap
        # Reset to defaults fixes the field, and the error it caused goes
        page.get_by_role("button", name="Reset to defaults").click()
        expect(ui.setting("Top-p")).to_have_value("0.95")
        expect(run_error).to_be_empty()
        # the other pages are a link away
        nav = page.get_by_role("navigation", name="More")
        expect(nav.get_by_role("link", name="Notebook (Python cells)")).to_have_attribute("href", "/web/notebook.html")
        expect(nav.get_by_role("link", name="JavaScript API example")).to_have_attribute("href", "/web/api.html")
    finally:
        ui.close()


@pytest.mark.browser
@pytest.mark.parametrize("width,height,scheme", [(390, 844, "light"), (1280, 800, "dark")])
def test_layout_fits_the_viewport(browser, server_url, tmp_path, width, height, scheme):
    ui = UI(browser, server_url, viewport={"width": width, "height": height}, color_scheme=scheme)
    try:
        ui.wait()
        page = ui.page
        ui.setting("Temperature").fill("0")
        ui.setting("Ignore end of turn").check()
        ui.say("Write a long story about a cat", 12)
        # the message box and Send are on the first screen, under the conversation
        send = ui.send.bounding_box()
        assert send["y"] + send["height"] <= height, send
        assert ui.log.bounding_box()["y"] < ui.message.bounding_box()["y"]
        assert ui.page_width() == [width, width, width]
        # the model menu's entry for the default model (served, not loaded here) gives its name from the header,
        # its size and cache state, and the file name on hover
        entry = page.get_by_label("Model", exact=True).locator("option").nth(1)
        expect(entry).to_have_text(re.compile(r"^SmolLM2 135M Instruct · [\d.]+ MB · download$"))
        expect(entry).to_have_attribute("title", DEFAULT_FILE)
        _screenshot(page, f"page-{width}x{height}-{scheme}.png", tmp_path)
        # with the settings panel and the model drawer open, still no sideways scrolling
        page.locator("#drawer > summary").click()
        assert ui.page_width() == [width, width, width]
        _screenshot(page, f"page-{width}x{height}-{scheme}-open.png", tmp_path)
        dark = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
        assert (dark == "rgb(20, 23, 29)") == (scheme == "dark"), dark
    finally:
        ui.close()


# -- a 1 GB-class model ----------------------------------------------------------------------------------------------

def _big_llama(path: Path, layers=14, hidden=2048, ffn=8192, heads=16, kv_heads=4, vocab=512) -> Path:
    """A llama GGUF of about 1 GB: Q8_0 matrices of zeros (fast to write; the test is about where the bytes go, not
    what they compute) and a byte-level tokenizer."""
    import numpy as np
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("synthetic 1 GB llama")
    for add, value in [(w.add_block_count, layers), (w.add_context_length, 4096), (w.add_embedding_length, hidden),
                       (w.add_feed_forward_length, ffn), (w.add_head_count, heads), (w.add_head_count_kv, kv_heads),
                       (w.add_layer_norm_rms_eps, 1e-5), (w.add_rope_freq_base, 10000.0)]:
        add(value)
    tokens = [bytes([b]).decode("latin-1") for b in range(256)] + ["ab"] + [f"<t{i}>" for i in range(vocab - 257)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_merges(["a b"])
    w.add_token_types([1] * vocab)
    w.add_eos_token_id(vocab - 1)

    def q8(name, rows, cols):
        raw = np.zeros((rows, cols // 32 * 34), np.uint8)
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    q8("token_embd.weight", vocab, hidden)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    hd = hidden // heads
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(hidden, np.float32))
        for name, rows, cols in [("attn_q", hidden, hidden), ("attn_k", kv_heads * hd, hidden),
                                 ("attn_v", kv_heads * hd, hidden), ("attn_output", hidden, hidden),
                                 ("ffn_gate", ffn, hidden), ("ffn_up", ffn, hidden), ("ffn_down", hidden, ffn)]:
            q8(p + name + ".weight", rows, cols)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def big_site(tmp_path_factory):
    """serve.py's server, plus /big/big.gguf: the 1 GB model (written once for the module)."""
    import serve
    folder = tmp_path_factory.mktemp("big")
    big = _big_llama(folder / "big.gguf")

    class Handler(serve.Handler):
        def _resolve(self):
            return big if self.path.split("?", 1)[0] == "/big/big.gguf" else super()._resolve()

    server = serve.AppServer(("127.0.0.1", 0), serve.ROOT, False)
    server.RequestHandlerClass = Handler
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", big.stat().st_size
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.browser
def test_a_1gb_model_loads_without_holding_the_file_in_memory(browser, big_site):
    """The 1 GB model is downloaded into the browser cache and uploaded from it a slice at a time: after the load the
    page's memory line shows the whole file in GPU buffers but a Python (wasm) heap of a small fraction of it, and the
    browser's own measure of the page's JS memory (workers included) is a small fraction too."""
    url, size = big_site
    ui = UI(browser, url, query="?model=/big/big.gguf&backend=webgpu")
    try:
        ui.wait(timeout=LOAD_MS)
        ready = ui.received("ready")[-1]
        assert ready["memory"]["weights"] >= size * 0.99 and ready["file"] == "big.gguf"
        memory = ui.page.locator("#memory").text_content()
        m = re.search(r"Python heap ([\d.]+) (MB|GB)", memory)
        assert m and m.group(2) == "MB" and float(m.group(1)) < 0.25 * size / 1e6, memory
        assert ready["memory"]["wasm_heap"] < 0.25 * size
        js = ui.page.evaluate("performance.measureUserAgentSpecificMemory().then((m) => m.bytes)")
        assert js < 0.25 * size, f"{js} bytes of JS memory for a {size}-byte model"
    finally:
        ui.close()
