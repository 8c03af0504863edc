"""The page's prompt cache that survives (issue 29): each conversation's model state (ChatSession.save: the messages
and the KV cache of their tokens) is kept in the browser's origin-private file system per conversation and model, by
the worker (web/worker.js, snapshot-save / -restore / -delete), and restored when the conversation is shown again.

- a conversation reloaded goes on where it was: its next reply equals the reply without the reload, and its prompt
  prefills only the new message (cached_tokens as many as without the reload; the stats line says so)
- a damaged kept state (truncated in OPFS) is deleted with a notice, and the reply is right, from what the session
  itself held; deleting a conversation deletes its state
- with "Keep each chat's prompt cache in this browser" off nothing is written (and what was kept is deleted)
- a full disk (QuotaExceededError) ends in a notice; the reply is whole
- all kept states together stay under the cap, the least recently used removed first
- the worker's Python glue (webapp.save_snapshot / restore_snapshot / snapshot_model), in CPython

The browser tests share one page (the tiny random qwen3 on the CPU path: Pyodide's start is most of their time); each
starts its own conversations.
"""
from __future__ import annotations

import asyncio
import json
import re

import pytest
from test_page_ui import GENERATE_MS, TINY, UI, _in_thread

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect

QUERY = "?model=/fake/qwen3.gguf&mode=chat&backend=cpu"
TOKENS = 3
GREEDY = dict(max_tokens=TOKENS, temperature=0, ignore_eos=True)   # the page's settings below, as engine settings

# {file name: bytes} of the kept states (OPFS folder cera_web-kv/), read from the page
KEPT = """async () => {
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('cera_web-kv', {create: true});
    const out = {};
    for await (const [name, handle] of dir.entries()) {
        try {
            if (name.endsWith('.snap')) out[name] = (await handle.getFile()).size;
        } catch (e) { /* removed while listed */ }
    }
    return out;
}"""

# Cut a kept state to half its bytes, as a crash or a full disk might leave it
TRUNCATE = """async (name) => {
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('cera_web-kv');
    const handle = await dir.getFileHandle(name);
    const size = (await handle.getFile()).size;
    const w = await handle.createWritable({keepExistingData: true});
    await w.truncate(Math.floor(size / 2));
    await w.close();
    return Math.floor(size / 2);
}"""


def _native(system: str, turns: list[str]) -> list[str]:
    """The greedy replies of a native ChatSession (CPython, the CPU backend: the page's here) to ``turns``."""
    from cera_web.engine import ChatSession, Engine

    async def run():
        engine = await Engine.load(str(TINY), context_size=2048, device="cpu")
        try:
            chat = ChatSession(engine, system=system or None)
            return [(await chat.send(t, **GREEDY)).text for t in turns]
        finally:
            engine.close()

    return _in_thread(lambda: asyncio.run(run()))


def _common(a: list[int], b: list[int]) -> int:
    """How many leading token ids a and b share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _greedy(ui):
    ui.setting("Temperature").fill("0")
    ui.setting("Ignore end of turn").check()


def _turn(ui, text: str, kept: bool = True) -> dict:
    """Send ``text``, wait for its reply; with kept: also for the worker to keep the state (its 'cache' message after
    the save). Returns the reply's 'done' message."""
    caches = len(ui.received("cache"))
    ui.say(text, TOKENS)
    done = ui.received("done")[-1]
    if kept:
        ui.page.wait_for_function("(n) => window.__received.filter((m) => m.type === 'cache').length > n",
                                  arg=caches, timeout=GENERATE_MS)
    return done


def _kept(ui) -> dict:
    return ui.page.evaluate(KEPT)


def _file(ui) -> str:
    """The kept state's file name of the conversation shown."""
    conversation = ui.page.evaluate("convs.current")
    names = [n for n in _kept(ui) if n.startswith(conversation + ".")]
    assert len(names) == 1, (conversation, _kept(ui))
    return names[0]


@pytest.fixture(scope="module")
def cache_page(browser, server_url):
    """The page on the tiny model (CPU path), greedy, dialogs accepted."""
    ui = UI(browser, server_url, query=QUERY)
    ui.page.on("dialog", lambda d: d.accept())
    try:
        ui.wait()
        _greedy(ui)
        yield ui
    finally:
        ui.close()


@pytest.mark.browser
def test_a_reloaded_conversation_prefills_only_its_new_message(cache_page):
    ui, page = cache_page, cache_page.page
    system, turns = "You answer in one word.", ["What is the capital of France?", "And of Italy?"]
    page.get_by_role("button", name="New chat").click()
    ui.setting("System prompt").fill(system)
    first = _turn(ui, turns[0])
    name = _file(ui)
    assert _kept(ui)[name] > 0

    page.reload()
    ui.wait()
    # the conversation, its system prompt and its state are back
    expect(ui.log.locator(".turn .content")).to_have_text([system, turns[0], first["text"]])
    expect(ui.setting("System prompt")).to_have_value(system)
    notice = page.locator("#notice")
    expect(notice).to_have_text(re.compile(r"^Resumed this conversation from its prompt cache kept in this browser "
                                           r"\(\d+ tokens\): the next message reads only itself\.$"))
    restored = int(re.search(r"\((\d+) tokens", notice.text_content()).group(1))
    _greedy(ui)
    second = _turn(ui, turns[1])
    assert second["cached_tokens"] == restored >= len(first["prompt_tokens"]), (second["cached_tokens"], restored)
    new = len(second["prompt_tokens"]) - second["cached_tokens"]
    assert ui.received("prompt")[-1]["total"] == new       # only the new message was prefilled
    expect(page.locator("#stats")).to_contain_text(f"({new} tokens, ")
    expect(page.locator("#stats")).to_contain_text(f", {restored} more from the cache")

    # the same two turns in a new conversation of this page, without a reload: the same replies, the same prefill
    page.get_by_role("button", name="New chat").click()
    ui.setting("System prompt").fill(system)
    again = [_turn(ui, t) for t in turns]
    assert [again[0]["text"], again[1]["text"]] == [first["text"], second["text"]]
    assert again[1]["prompt_tokens"] == second["prompt_tokens"]
    assert again[1]["cached_tokens"] == second["cached_tokens"]
    assert first["text"] and second["text"]


@pytest.mark.browser
def test_a_damaged_kept_state_is_deleted_with_a_notice_and_the_reply_is_right(cache_page):
    ui, page = cache_page, cache_page.page
    turns = ["Name a color.", "And another one?"]
    expected = _native("", turns)
    menu = page.get_by_label("Conversations")
    page.get_by_role("button", name="New chat").click()
    ui.setting("System prompt").fill("")
    first = _turn(ui, turns[0])
    assert first["text"] == expected[0]
    damaged = _file(ui)
    title = f"{turns[0]} · 2 messages"
    page.get_by_role("button", name="New chat").click()
    other = _turn(ui, "Count to three.")      # the engine now holds this conversation's state
    other_file = _file(ui)
    size = _kept(ui)[damaged]
    assert page.evaluate(TRUNCATE, damaged) == _kept(ui)[damaged] == size // 2

    # showing the damaged one again: its state is refused, deleted, and said so in one line
    menu.select_option(label=title)
    notice = page.locator("#notice")
    expect(notice).to_have_text(re.compile(r"^This conversation's kept prompt cache was not used and is deleted \(the "
                                           r"snapshot is truncated[^()]*\); the next message reads the whole "
                                           r"conversation again\.$"))
    page.wait_for_function(f"({KEPT})().then((kept) => !({json.dumps(damaged)} in kept))", timeout=GENERATE_MS)
    second = _turn(ui, turns[1])
    expect(ui.alert).to_have_count(0)
    assert second["text"] == expected[1]
    # what the session held (the other conversation's prompt, as far as it matches), not the damaged state
    assert second["cached_tokens"] == _common(other["prompt_tokens"], second["prompt_tokens"])
    assert second["cached_tokens"] < len(first["prompt_tokens"])
    assert _file(ui) == damaged           # kept again after this turn, whole
    # deleting the conversation deletes its kept state; the other conversation's stays
    page.get_by_role("button", name="Delete conversation").click()
    page.wait_for_function(f"({KEPT})().then((kept) => !({json.dumps(damaged)} in kept))", timeout=GENERATE_MS)
    assert other_file in _kept(ui)


@pytest.mark.browser
def test_with_keeping_off_nothing_is_written(cache_page):
    ui, page = cache_page, cache_page.page
    page.get_by_role("button", name="New chat").click()
    _turn(ui, "hello")
    assert _kept(ui)
    page.locator("#drawer > summary").click()
    keep = page.get_by_label("Keep each chat's prompt cache in this browser")
    expect(keep).to_be_checked()
    keep.uncheck()
    # off: what was kept goes, the choice is remembered in this browser, and turns write nothing
    page.wait_for_function(f"({KEPT})().then((kept) => Object.keys(kept).length === 0)", timeout=GENERATE_MS)
    assert page.evaluate("localStorage.getItem('cera_web.keep_state')") == "off"
    expect(page.locator("#snapshot-usage")).to_have_text(re.compile(r"^Off: "))
    page.get_by_role("button", name="New chat").click()
    _turn(ui, "one", kept=False)
    _turn(ui, "two", kept=False)      # runs after any save the first turn would have asked for
    assert _kept(ui) == {}
    # on again: the conversation shown is kept from now on
    keep.check()
    page.wait_for_function(f"({KEPT})().then((kept) => Object.keys(kept).length === 1)", timeout=GENERATE_MS)
    assert page.evaluate("localStorage.getItem('cera_web.keep_state')") == "on"
    expect(page.locator("#snapshot-usage")).to_have_text(re.compile(r"^Prompt caches kept: 1 \("))


@pytest.mark.browser
def test_full_storage_ends_in_a_notice_never_a_failed_reply(cache_page):
    ui, page = cache_page, cache_page.page
    page.get_by_role("button", name="New chat").click()
    _turn(ui, "hello")
    name = _file(ui)
    worker = page.workers[0]
    # from now on the worker's writes of kept states fail as a full disk makes them fail
    worker.evaluate("""() => {
        const real = self.__realCreateWritable = FileSystemFileHandle.prototype.createWritable;
        FileSystemFileHandle.prototype.createWritable = async function (...args) {
            const w = await real.apply(this, args);
            if (this.name.endsWith('.snap')) {
                w.write = async () => { throw new DOMException('The quota has been exceeded.', 'QuotaExceededError'); };
            }
            return w;
        };
    }""")
    try:
        done = _turn(ui, "more")
        # the failed save's notice, before writes work again (a 'cache' message of another cause may end _turn's
        # wait first: a CI rehearsal saw the save run after the writes were restored)
        expect(page.locator("#notice")).to_have_text(
            "This conversation's prompt cache was not kept in this browser (the browser's storage for this site is "
            "full); the conversation itself is kept.")
    finally:
        worker.evaluate("() => { FileSystemFileHandle.prototype.createWritable = self.__realCreateWritable; }")
    assert done["type"] == "done" and done["text"] and done["stop_reason"] == "max_tokens"
    expect(ui.alert).to_have_count(0)
    expect(ui.log.locator(".turn")).to_have_count(4)
    assert name not in _kept(ui)         # no half-written file, and not the older state either


@pytest.mark.browser
def test_kept_states_stay_under_the_cap_least_recently_used_first(cache_page):
    """The worker's store (keepSnapshot, as snapshot-save uses it, on files of made-up bytes): before a file is
    written, the least recently used others are removed until all fit the cap; a restore counts as a use; a file
    larger than the cap is not kept (and nothing else is removed for it)."""
    worker = cache_page.page.workers[0]
    got = worker.evaluate("""async () => {
        await snapshotDelete({});
        const dir = await kvDir();
        const keep = (name, n, cap) => keepSnapshot(dir, `lru-${name}.test.snap`, new Uint8Array(n).fill(7), cap);
        const names = async () => (await snapshotFiles(dir)).map((f) => f.name.split('.')[0]).sort().join(' ');
        const out = [];
        out.push(await keep('a', 1000, 2500), await keep('b', 1000, 2500), await names());
        await markUse(dir, 'lru-a.test.snap');            // a restore of a
        out.push(await keep('c', 1000, 2500), await names());                 // b goes
        out.push(await keep('d', 3000, 2500), await names());                 // too big: kept, nothing goes
        out.push(await keep('e', 1000, 2000), await names());                 // a goes (c used since)
        out.push(await keep('e', 1500, 2500), await names());                 // a new state of e: c stays
        await snapshotDelete({});
        out.push(await names());
        return out;
    }""")
    assert got[:3] == ["", "", "lru-a lru-b"], got
    assert got[3:5] == ["", "lru-a lru-c"], got
    assert re.fullmatch(r"it takes 3\.0 kB, more than the 2\.5 kB kept conversations may use", got[5]), got
    assert got[6] == "lru-a lru-c", got
    assert got[7:9] == ["", "lru-c lru-e"], got
    assert got[9:11] == ["", "lru-c lru-e"], got
    assert got[11] == "", got


# -- the worker's Python glue, in CPython --------------------------------------------------------------------------

def test_glue_keeps_and_restores_the_conversation_state():
    """save_snapshot gives the page conversation's snapshot (None for an empty one); restore_snapshot makes it a new
    engine's state (its next turn prefills only the new message and replies as without it) or says in one line why
    not, changing nothing: a truncated snapshot, one of another model."""
    from cera_web import webapp
    from cera_web.source import FileSource

    greedy = json.dumps({"temperature": "0", "max_tokens": TOKENS, "ignore_eos": True})
    sent = []
    webapp.init(lambda text: sent.append(json.loads(text)))

    async def run():
        out = {}
        assert await webapp.prepare("", "cpu")
        assert await webapp.load_source(FileSource(str(TINY)), "file")
        out["empty"] = await webapp.save_snapshot()
        out["key"] = webapp.snapshot_model()
        assert await webapp.chat_send("hello", greedy)
        out["data"] = await webapp.save_snapshot()
        messages = [dict(m) for m in webapp._state.chat.messages]
        assert await webapp.chat_send("again", greedy)
        out["reference"] = sent[-1]
        # a new engine (a reload): the conversation from the page, its state from the snapshot
        assert await webapp.load_source(FileSource(str(TINY)), "file")
        webapp.chat_set(messages)
        out["restored"] = json.loads(webapp.restore_snapshot(out["data"]))
        out["truncated"] = json.loads(webapp.restore_snapshot(out["data"][:len(out["data"]) // 2]))
        other = TINY.with_name("qwen3-f32.gguf")
        from cera_web.engine import Engine
        engine = await Engine.load(str(other), context_size=2048, device="cpu")
        try:
            webapp._state.engine, kept = engine, webapp._state.engine
            out["other"] = json.loads(webapp.restore_snapshot(out["data"]))
        finally:
            webapp._state.engine = kept
            engine.close()
        assert await webapp.chat_send("again", greedy)
        out["after"] = sent[-1]
        return out

    try:
        out = _in_thread(lambda: asyncio.run(run()))
    finally:   # leave the glue as other tests expect it: no model loaded, the GPU for the next load
        if webapp._state.engine is not None:
            webapp._state.engine.close()
        webapp._state.engine = webapp._state.chat = None
        webapp._state.backend = "webgpu"
    from cera_web.snapshot import read_header
    assert out["empty"] is None
    header = read_header(out["data"])
    assert header["model"].split(":")[1][:16] == out["key"] and len(out["key"]) == 16
    assert header["extra"]["messages"][0] == {"role": "user", "content": "hello"}
    ref, after = out["reference"], out["after"]
    assert out["restored"] == {"tokens": len(header["tokens"])} and header["tokens"]
    assert out["truncated"] == {"error": out["truncated"]["error"]} and "truncated" in out["truncated"]["error"]
    assert "another model" in out["other"]["error"]
    assert all("\n" not in out[k]["error"] for k in ("truncated", "other"))
    # the failed restores changed nothing: the next turn starts from the restored state, as the first session did
    assert after["type"] == "done" and after["text"] == ref["text"] and after["prompt_tokens"] == ref["prompt_tokens"]
    assert after["cached_tokens"] == len(header["tokens"]) == ref["cached_tokens"]
