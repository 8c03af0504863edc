"""Models named as people know them, read from the GGUF header before any download (web/ggufmeta.js), in one headless
Chromium page whose worker never starts (no Pyodide, no model load: the menu is shown before any load).

- the JS reader gives what cera_web/gguf.py reads from the served real checkpoints (metadata, tensor table, data
  offset), through Range requests that start at 256 KiB, at least double, and stop once the header is read
- hostile and truncated headers are refused as gguf.py refuses them, after a bounded number of bytes; a header longer
  than the 8 MiB budget gives what was read, after exactly 8 MiB; a server without Range is read from its start
- the model menu names each served model "SmolLM2 135M Instruct · 98.4 MB · download" (file name as title), an
  unreadable file by its file name; a URL typed into the Model URL field is named before it loads
- the Python rule (cera_web/names.py, the name in the worker's 'ready' message) gives the JS rule's name for every
  served checkpoint and test fixture
- names are kept in localStorage: opening the page again reads no header bytes (a served model: no request; a typed
  URL: one HEAD); a file whose size or ETag changed is read again
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import re
import struct
from pathlib import Path

import pytest

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect

from cera_web.errors import GGUFFormatError          # noqa: E402
from cera_web.gguf import UnreadArray, open_gguf, parse_gguf   # noqa: E402
from cera_web.names import display_name, friendly_name, size_label   # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / ".assets" / "models"
SMALL = ROOT / "tests" / "fixtures" / "small"
TINY = SMALL / "qwen3-q8_0.gguf"
FIXTURES = sorted(SMALL.glob("*.gguf"))
FIRST = 256 << 10
BUDGET = 8 << 20
# What the menu calls the checkpoints served here (the default one is always there; the others once fetched).
NAMES = {
    "SmolLM2-135M-Instruct.Q4_1.gguf": "SmolLM2 135M Instruct",          # finetune "8k-lc100k-mix1-ep2" dropped
    "gemma-3-270m-Q4_K_M.gguf": "Gemma 3 270M Base",                       # no chat template
    "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf": "Qwen2.5 Coder 0.5B Instruct",   # finetune "Instruct-AWQ"
    "qwen2.5-coder-1.5b-instruct-Q4_K_M.gguf": "Qwen2.5 Coder 1.5B Instruct",   # fetched for the slow tests only
}
SERVED = [f for f in NAMES if (MODELS / f).is_file()]


def _string(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def _kv_string(key: str, value: str) -> bytes:
    return _string(key.encode()) + struct.pack("<I", 8) + _string(value.encode())


def _header(n_tensors: int, n_kv: int, body: bytes, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + body


def _endless() -> bytes:
    """A header whose vocabulary (300,000 strings of 64 bytes, 21.6 MB) runs past the 8 MiB budget, after the name."""
    token = _string(b"t" * 64)
    vocab = _string(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 300_000) + token * 300_000
    return _header(0, 2, _kv_string("general.name", "Endless") + vocab) + b"\0" * 64


# name -> (body, honours Range): the hostile and odd files the page is given
FAKES = {
    # SmolLM2 cut inside its chat template, and inside its vocabulary (whose item count the file cannot hold)
    "truncated.gguf": ((MODELS / SERVED[0]).read_bytes()[:1_769_200] if SERVED else b"", True),
    "short-vocab.gguf": ((MODELS / SERVED[0]).read_bytes()[:300_000] if SERVED else b"", True),
    "long-string.gguf": (_header(0, 1, struct.pack("<Q", 1 << 62) + b"x" * 1000), True),
    "many-keys.gguf": (_header(0, 1 << 40, b"\0" * 1000), True),
    "huge-array.gguf": (_header(0, 1, _string(b"a") + struct.pack("<IIQ", 9, 4, 1 << 50) + b"\0" * 1000), True),
    "bad-magic.gguf": (b"GGML" + b"\0" * 1000, True),
    "broken.gguf": (b"GGML" + b"\0" * 1000, True),        # in the menu
    "version1.gguf": (_header(0, 0, b"\0" * 100, version=1), True),
    "endless.gguf": (_endless(), True),
    "norange.gguf": (TINY.read_bytes(), False),
    "tiny.gguf": (TINY.read_bytes(), True),
    **{p.name: (p.read_bytes(), True) for p in FIXTURES},   # the test fixtures, by their own names
}


class Server:
    """Routes /fake/NAME to FAKES[NAME], answering Range requests with 206 (or ignoring them), with an ETag of the
    body; counts the bytes sent (sent) and the HEAD requests (heads)."""

    def __init__(self):
        self.sent: dict[str, list[tuple[int, int]]] = {}
        self.heads: dict[str, int] = {}
        self.index: list[dict] = []   # the menu's list of served models (menu_page)

    def __call__(self, route):
        name = route.request.url.rsplit("/", 1)[-1]
        body, ranged = FAKES[name]
        headers = {"Content-Type": "application/octet-stream", "ETag": f'"{hashlib.sha256(body).hexdigest()[:16]}"'}
        if route.request.method == "HEAD":
            self.heads[name] = self.heads.get(name, 0) + 1
            route.fulfill(status=200, body=body, headers={**headers, "Content-Length": str(len(body))})
            return
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", route.request.headers.get("range", ""))
        if not ranged or not m:
            self.sent.setdefault(name, []).append((0, len(body)))
            route.fulfill(status=200, body=body, headers=headers)
            return
        first, last = int(m[1]), min(int(m[2]), len(body) - 1)
        self.sent.setdefault(name, []).append((first, last + 1))
        route.fulfill(status=206, body=body[first:last + 1], headers={
            **headers, "Content-Range": f"bytes {first}-{last}/{len(body)}"})


@pytest.fixture(scope="module")
def menu_page(browser, server_url):
    """The chat page with its worker replaced by an empty script (nothing loads), the menu's list extended by two
    fakes, and every Range request to a served model recorded."""
    import serve
    context = browser.new_context()
    page = context.new_page()
    fakes = Server()
    ranges: list[tuple[str, str]] = []
    page.on("request", lambda r: ranges.append((r.url, r.headers.get("range"))) if "/models/" in r.url else None)
    page.route(f"{server_url}/web/worker.js", lambda route: route.fulfill(
        status=200, body="", headers={"Content-Type": "text/javascript"}))
    index = fakes.index = json.loads(serve.models_index())["models"] + [
        {"name": "broken", "file": "broken.gguf", "url": "/fake/broken.gguf", "size": 1004, "about": "",
         "default": False}]
    page.route(f"{server_url}/models/index.json", lambda route: route.fulfill(
        status=200, body=json.dumps({"models": index}), headers={"Content-Type": "application/json"}))
    page.route(f"{server_url}/fake/*", fakes)
    page.goto(server_url + "/")
    page.wait_for_function("window.CeraGGUFMeta !== undefined")
    try:
        yield page, fakes, ranges
    finally:
        context.close()


# the header without its raw bytes (kept for the worker's preflight: megabytes that Playwright would pass back as a
# JSON object of numbered keys), their count in bytesKept
READ = """async ([url, budget]) => {
  try {
    const {bytes, ...header} = await CeraGGUFMeta.readUrl(url, budget ? {budget} : {});
    return {...header, bytesKept: bytes ? bytes.length : null};
  }
  catch (e) { return {error: e.name, message: e.message}; }
}"""


def _python_view(g):
    """gguf.py's reading in the JS reader's shape: arrays over 64 items as {type, length}."""
    def value(v):
        if isinstance(v, UnreadArray) or (isinstance(v, list) and len(v) > 64):
            return {"length": len(v)}
        return v
    return {k: value(v) for k, v in g.metadata.items()}


def _js_view(header):
    return {k: ({"length": v["length"]} if isinstance(v, dict) else v) for k, v in header["metadata"].items()}


def test_reader_matches_gguf_py_on_the_served_models(menu_page, server_url):
    page, _, ranges = menu_page
    assert SERVED and SERVED[0] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    for file in SERVED:
        url = f"{server_url}/models/{file}?reader"   # not the URL the page itself reads for its menu
        ranges.clear()
        header = page.evaluate(READ, [url, None])
        g = open_gguf(MODELS / file)
        assert header["complete"] and header["version"] == g.version and header["fileSize"] == g.file_size
        assert _js_view(header) == _python_view(g), file
        assert header["dataOffset"] == g.data_offset
        assert [(t["name"], tuple(t["shape"]), t["type"], header["dataOffset"] + t["offset"])
                for t in header["tensors"]] == [(t.name, t.shape, int(t.type), t.offset) for t in g.tensors.values()]
        # the requests: 0-256KiB first, then contiguous, each at least doubling what was read, the last one the
        # first to reach the end of the tensor table (which lies within the alignment padding before data_offset)
        spans = [tuple(map(int, re.fullmatch(r"bytes=(\d+)-(\d+)", r).groups())) for u, r in ranges if u == url]
        assert spans[0] == (0, FIRST - 1), spans
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            assert b0 == a1 + 1 and b1 + 1 >= 2 * b0, spans
        assert spans[-1][1] + 1 >= g.data_offset - g.alignment and (len(spans) == 1 or spans[-2][1] + 1 < g.data_offset)
        assert header["bytesRead"] == spans[-1][1] + 1 == header["bytesKept"] <= BUDGET
        name = page.evaluate("([h, f]) => CeraGGUFMeta.friendlyName(h, f)", [header, file])
        assert name == NAMES[file] == display_name(g, file)   # the Python rule (cera_web/names.py) agrees


def test_hostile_headers_are_refused_as_gguf_py_refuses_them(menu_page, server_url):
    page, fakes, _ = menu_page
    for name in ["short-vocab.gguf", "long-string.gguf", "many-keys.gguf", "huge-array.gguf", "bad-magic.gguf",
                 "version1.gguf"]:
        body = FAKES[name][0]
        with pytest.raises(GGUFFormatError):
            parse_gguf(lambda o, n: body[o:o + n], len(body))
        got = page.evaluate(READ, [f"{server_url}/fake/{name}", None])
        assert got.get("error") == "FormatError", (name, got)
        assert got["message"].startswith("not a readable GGUF header: "), (name, got)
        # one request of the first slice at most: nothing past what it claims was asked for
        assert fakes.sent[name] == [(0, min(FIRST, len(body)))], (name, fakes.sent[name])
    body = FAKES["truncated.gguf"][0]
    with pytest.raises(GGUFFormatError):
        parse_gguf(lambda o, n: body[o:o + n], len(body))
    got = page.evaluate(READ, [f"{server_url}/fake/truncated.gguf", None])
    assert got.get("error") == "FormatError" and "ends at byte 1769200" in got["message"], got
    assert fakes.sent["truncated.gguf"] == [(0, FIRST), (FIRST, 2 * FIRST), (2 * FIRST, 4 * FIRST),
                                            (4 * FIRST, 1_769_200)]


def test_a_header_past_the_budget_stops_at_the_budget(menu_page, server_url):
    page, fakes, _ = menu_page
    header = page.evaluate(READ, [f"{server_url}/fake/endless.gguf", None])
    assert header["complete"] is False and header["metadata"] == {"general.name": "Endless"}
    assert header["bytesRead"] == BUDGET and sum(b - a for a, b in fakes.sent["endless.gguf"]) == BUDGET
    # no chat template known either way: no Instruct/Base; a smaller budget is kept to as well
    assert page.evaluate("([h]) => CeraGGUFMeta.friendlyName(h, 'endless.gguf')", [header]) == "Endless"
    small = page.evaluate(READ, [f"{server_url}/fake/endless.gguf", 300_000])
    assert small["bytesRead"] == 300_000 and fakes.sent["endless.gguf"][-2:] == [(0, FIRST), (FIRST, 300_000)]


def test_without_range_support_the_header_is_read_from_the_start(menu_page, server_url):
    page, fakes, _ = menu_page
    header = page.evaluate(READ, [f"{server_url}/fake/norange.gguf", None])
    g = open_gguf(TINY)
    assert header["complete"] and _js_view(header) == _python_view(g) and header["dataOffset"] == g.data_offset
    # no size label in this file: the size is its parameters counted from the tensor shapes
    assert "general.size_label" not in g.metadata
    params = sum(t.n_elements for t in g.tensors.values())
    assert 10e3 <= params < 1e6, params   # the label below: thousands, whole
    name = page.evaluate("([h]) => CeraGGUFMeta.friendlyName(h, 'norange.gguf')", [header])
    assert name == f"tiny random qwen3 {round(params / 1e3)}K Instruct" == "tiny random qwen3 167K Instruct"


def test_friendly_name_rules(menu_page):
    page, _, _ = menu_page
    name = "([md, file, complete]) => CeraGGUFMeta.friendlyName({metadata: md, complete, tensors: null}, file)"
    cases = [
        # general.name kept; its size word spelled as the label; Base without a template
        ({"general.name": "Gemma 3 270m", "general.size_label": "270M"}, "x.gguf", True, "Gemma 3 270M Base"),
        # the name says Instruct already; a template adds nothing
        ({"general.name": "Phi 3 Mini Instruct", "tokenizer.chat_template": "t"}, "", True, "Phi 3 Mini Instruct"),
        ({"general.name": "Foo Chat", "tokenizer.chat_template": "t"}, "", True, "Foo Chat"),
        # a finetune that is the whole name is not dropped; basename when there is no name
        ({"general.name": "Instruct", "general.finetune": "instruct"}, "", True, "Instruct Base"),
        ({"general.basename": "my-model", "general.size_label": "7B"}, "", False, "my model 7B"),
        # a finetune that is not the name's tail stays
        ({"general.name": "A B C", "general.finetune": "B"}, "", False, "A B C"),
        ({}, "x.gguf", True, None),
    ]
    for md, file, complete, want in cases:
        assert page.evaluate(name, [md, file, complete]) == want, (md, want)
        assert friendly_name(md, file, None, complete) == want, (md, want)    # the Python rule too
    counts = [134515008, 494032768, 9.96e6, 1.2e10, 7e9, 999, 1.25e9, 1.05e6, 10.5e6, 2.5e12, 9.95e9]
    sizes = page.evaluate(f"{json.dumps(counts)}.map(CeraGGUFMeta.sizeLabel)")
    assert sizes[:6] == ["135M", "494M", "10M", "12B", "7B", "1K"]
    assert [size_label(n) for n in counts] == sizes, sizes   # halves round up in both


def test_menu_and_url_field_show_the_names(menu_page, server_url):
    page, _, _ = menu_page
    menu = page.get_by_label("Model", exact=True)
    for file in SERVED:
        size = (MODELS / file).stat().st_size
        option = menu.locator(f'option[title="{file}"]')
        shown = f"{size / 1e9:.2f} GB" if size >= 1e9 else f"{size / 1e6:.1f} MB"     # app.js formatBytes
        expect(option).to_have_text(f"{NAMES[file]} · {shown} · download")
    expect(menu.locator('option[title="broken.gguf"]')).to_have_text("broken.gguf · 1.0 kB · download")
    field = page.get_by_label("Model URL")
    field.fill("/fake/tiny.gguf")
    expect(page.locator("#model-url-name")).to_have_text(re.compile(r"^tiny random qwen3 \S+ Instruct \(tiny\.gguf\)$"))
    field.fill("/fake/broken.gguf")
    expect(page.locator("#model-url-name")).to_have_text("broken.gguf")
    # a URL the menu has read already: its name at once, without reading it again
    requests = []
    page.on("request", lambda r: requests.append(r.url) if r.url.endswith(SERVED[0]) else None)
    field.fill("/models/" + SERVED[0])
    expect(page.locator("#model-url-name")).to_have_text(f"{NAMES[SERVED[0]]} ({SERVED[0]})")
    assert requests == []


NAME = "async ([url, file]) => CeraGGUFMeta.friendlyName(await CeraGGUFMeta.readUrl(url), file)"


def test_python_and_js_rules_give_one_name(menu_page, server_url):
    """cera_web/names.py (what the 'ready' message, the panel and the API page say) and ggufmeta.js (the menu) name
    every test fixture alike (the served checkpoints: test_reader_matches_gguf_py_on_the_served_models); the
    worker's 'ready' message carries that name (a CPython load of the tiny fixture on the CPU)."""
    page, _, _ = menu_page
    assert len(FIXTURES) >= 8, FIXTURES
    for path in FIXTURES:
        js = page.evaluate(NAME, [f"{server_url}/fake/{path.name}", path.name])
        assert js == display_name(open_gguf(path), path.name), path.name

    from cera_web import webapp
    from cera_web.source import FileSource
    sent = []
    webapp.init(lambda text: sent.append(json.loads(text)))

    async def load():
        assert await webapp.prepare("", "cpu")
        return await webapp.load_source(FileSource(str(TINY)), "file")
    try:   # in a thread of its own: Playwright's loop runs in this one
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            assert pool.submit(asyncio.run, load()).result()
    finally:        # leave the glue as other tests expect it: no model loaded
        if webapp._state.engine is not None:
            webapp._state.engine.close()
        webapp._state.engine = webapp._state.chat = None
    ready = sent[-1]
    assert ready["type"] == "ready" and ready["file"] == TINY.name and ready["model"] == "tiny random qwen3", ready
    assert ready["name"] == page.evaluate(NAME, [f"{server_url}/fake/{TINY.name}", TINY.name]) \
        == "tiny random qwen3 167K Instruct"


def _metadata_only(name: str) -> bytes:
    return _header(0, 1, _kv_string("general.name", name))


def test_names_are_kept_and_a_changed_file_is_read_again(menu_page, server_url):
    """A second page open reads no header bytes: the served models (size from the list) and an unreadable one cost
    no request; a typed URL one HEAD. A file whose size (the list's) or ETag (the HEAD's) changed is read again."""
    page, fakes, ranges = menu_page
    menu = page.get_by_label("Model", exact=True)
    field = page.get_by_label("Model URL")
    FAKES["changing.gguf"] = (_metadata_only("First Model"), True)
    FAKES["typed.gguf"] = (_metadata_only("Alpha Model"), True)
    entry = {"name": "changing", "file": "changing.gguf", "url": "/fake/changing.gguf",
             "size": len(FAKES["changing.gguf"][0]), "about": "", "default": False}
    fakes.index.append(entry)

    def shown(changing: str | None):
        for file in SERVED:
            expect(menu.locator(f'option[title="{file}"]')).to_have_text(re.compile(f"^{re.escape(NAMES[file])} · "))
        expect(menu.locator('option[title="broken.gguf"]')).to_have_text(re.compile(r"^broken\.gguf · "))
        if changing:
            expect(menu.locator('option[title="changing.gguf"]')).to_have_text(re.compile(f"^{changing} · "))

    def typed(want: str):
        field.fill("/fake/typed.gguf")
        expect(page.locator("#model-url-name")).to_have_text(f"{want} (typed.gguf)")

    def reads(name: str) -> int:
        return len(fakes.sent.get(name, []))

    try:
        shown(None)   # the served models named (read when the page first opened)
        page.reload()
        shown("First Model Base")
        assert reads("changing.gguf") >= 1
        typed("Alpha Model Base")
        assert reads("typed.gguf") >= 1

        # the second open: nothing read, and no request but the typed URL's HEAD
        ranges.clear()
        before = {name: reads(name) for name in ["changing.gguf", "typed.gguf", "broken.gguf"]}
        heads = dict(fakes.heads)
        page.reload()
        shown("First Model Base")
        typed("Alpha Model Base")
        assert [u for u, _ in ranges if u.split("?")[0].endswith(".gguf")] == []
        assert {name: reads(name) for name in before} == before
        assert fakes.heads.get("typed.gguf", 0) == heads.get("typed.gguf", 0) + 1
        assert fakes.heads.get("changing.gguf", 0) == heads.get("changing.gguf", 0)   # its size came from the list

        # changed files: another size (in the list) and the same size with another ETag (typed)
        FAKES["changing.gguf"] = (_metadata_only("Second Model Longer"), True)
        entry["size"] = len(FAKES["changing.gguf"][0])
        FAKES["typed.gguf"] = (_metadata_only("Omega Model"), True)
        assert len(FAKES["typed.gguf"][0]) == len(_metadata_only("Alpha Model"))   # the same size: the ETag tells
        page.reload()
        shown("Second Model Longer Base")
        typed("Omega Model Base")
        assert reads("changing.gguf") > before["changing.gguf"] and reads("typed.gguf") > before["typed.gguf"]
    finally:
        fakes.index.remove(entry)
        del FAKES["changing.gguf"], FAKES["typed.gguf"]
