"""Models delivered the way the web expects: URL downloads with progress, the browser cache (OPFS + SHA-256 sidecar),
local files (picker, drag-and-drop), refusal of models that cannot fit before they are downloaded, the memory
summary, and the PyScript notebook.

Browser tests (mark ``browser``) use their own instance of serve.py's server that also serves the tiny models of
tests/fixtures/small under /testmodels/ and counts what it sends, so a test can tell whether the page downloaded a
model again. Each test opens a fresh browser context (empty cache) from conftest's ``browser``. Generations check
their text against the references: transformers' greedy continuations (tests/fixtures/small/reference.json for the
tiny models, tests/fixtures/smollm2_reference.json for the default model).

The CPython tests check the Python side (cera_web.webapp) against the ``gguf`` package's reading of the same files.
"""
from __future__ import annotations

import base64
import json
import re
import threading
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

import serve

gguf = pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "tests" / "fixtures" / "small"
SMALL_INFO = json.loads((SMALL / "reference.json").read_text())
SMOL_REFERENCE = ROOT / "tests" / "fixtures" / "smollm2_reference.json"

LOAD_MS = 300_000
GENERATE_MS = 300_000


def _tensors(path: Path):
    return gguf.GGUFReader(str(path)).tensors


def _field(path: Path, key: str):
    return gguf.GGUFReader(str(path)).fields[key].contents()


# -- a server that counts ----------------------------------------------------------------------------------------------


class _CountingHandler(serve.Handler):
    """serve.py's handler, plus /testmodels/NAME (tests/fixtures/small/NAME), counting whole-file GETs and their
    body bytes per path (gets, sent), and apart from them the bytes of Range GETs (ranged: the page reads each
    model's header by Range requests to name it in the menu)."""

    def _resolve(self):
        path = self.path.split("?", 1)[0]
        if path.startswith("/testmodels/"):
            file = SMALL / path.rsplit("/", 1)[1]
            return file if file.is_file() and file.parent == SMALL else 404
        return super()._resolve()

    def do_GET(self):
        if not self.headers.get("Range"):
            self.server.gets[self.path.split("?", 1)[0]] += 1
        super().do_GET()

    def _send_body(self, fh, size, ctype, etag, mtime, head):
        server, path = self.server, self.path.split("?", 1)[0]
        counter = server.ranged if self.headers.get("Range") else server.sent

        class Counted:       # counts the bytes read from the file to be sent
            def seek(self, n):
                fh.seek(n)

            def read(self, n):
                data = fh.read(n)
                counter[path] += len(data)
                return data

        super()._send_body(Counted(), size, ctype, etag, mtime, head)


@pytest.fixture(scope="module")
def site():
    from cera_web.tools.assets import ensure_assets
    ensure_assets()
    server = serve.AppServer(("127.0.0.1", 0), serve.ROOT, False)
    server.RequestHandlerClass = _CountingHandler
    server.gets, server.sent, server.ranged = Counter(), Counter(), Counter()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield SimpleNamespace(url=f"http://127.0.0.1:{server.server_address[1]}", gets=server.gets, sent=server.sent,
                              ranged=server.ranged)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# -- the page ----------------------------------------------------------------------------------------------------------

# Records every text the progress line, status, notice and error show, and every request made (the worker's too).
RECORDER = """
    window.__seen = [];
    document.addEventListener('DOMContentLoaded', () => {
      for (const id of ['progress-text', 'status', 'notice', 'error']) {
        const el = document.getElementById(id);
        if (el) new MutationObserver(() => window.__seen.push(`${id}: ${el.textContent}`))
          .observe(el, {childList: true, characterData: true, subtree: true});
      }
    });
"""


class Page:
    def __init__(self, browser, site):
        from playwright.sync_api import expect
        self.expect = expect
        self.context = browser.new_context()
        self.page = self.context.new_page()
        self.site = site
        self.console: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        self.context.on("request", lambda r: self.requests.append(r.url))
        self.page.add_init_script(RECORDER)
        p = self.page
        self.status, self.alert = p.get_by_role("status"), p.get_by_role("alert")
        self.output = p.get_by_role("region", name="Output")
        self.cache_items = p.get_by_role("list", name="Cached models").get_by_role("listitem")

    def close(self):
        self.context.close()

    def diagnostics(self) -> str:
        p = self.page
        return (f"status={p.locator('#status').text_content()!r} errors={p.locator('.error').all_text_contents()!r}\n"
                + "\n".join(self.console[-30:]))

    def seen(self) -> list[str]:
        return self.page.evaluate("window.__seen")

    def open(self, query: str = ""):
        self.page.goto(f"{self.site.url}/{query}")

    def wait_ready(self, timeout=LOAD_MS):
        try:
            self.expect(self.status).to_have_text(re.compile(r"^Ready"), timeout=timeout)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.diagnostics()}") from None
        self.expect(self.alert).to_have_count(0)
        self.show_drawer()   # these tests look at the cache list and use its buttons

    def generate(self, prompt: str, max_tokens: int) -> str:
        p = self.page
        p.get_by_label("Raw completion").check()
        p.get_by_label("Prompt", exact=True).fill(prompt)
        p.get_by_label("Max tokens").fill(str(max_tokens))
        p.get_by_label("Chat template").set_checked(False)
        p.get_by_role("button", name="Generate").click()
        try:
            self.expect(self.status).to_have_text(re.compile(r"^Ready \("), timeout=GENERATE_MS)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.diagnostics()}") from None
        self.expect(self.alert).to_have_count(0)
        return self.output.text_content()

    def show_drawer(self):
        """Open the model and cache controls (folded once a model has loaded)."""
        if self.page.locator("#drawer").get_attribute("open") is None:
            self.page.get_by_text("Model and cache", exact=True).click()

    def opfs_files(self) -> dict:
        """{name: size} of the files in the page's model cache directory (read independently of the page's code)."""
        return self.page.evaluate("""async () => {
            const root = await navigator.storage.getDirectory();
            let dir;
            try { dir = await root.getDirectoryHandle('cera_web-models'); } catch (e) { return {}; }
            const out = {};
            for await (const [name, handle] of dir.entries()) out[name] = (await handle.getFile()).size;
            return out;
        }""")

    def assert_offline(self):
        """Every request went to the test server (or stayed in the browser)."""
        away = [u for u in self.requests if not u.startswith((self.site.url, "blob:", "data:"))]
        assert not away, away


@pytest.fixture
def tab(browser, site):
    p = Page(browser, site)
    try:
        yield p
    finally:
        p.close()


def _small_case(stem: str) -> dict:
    return SMALL_INFO["files"][stem]["text_case"]


# -- CPython: the checks behind the page ----------------------------------------------------------------------------


def test_fit_report_counts_weights_and_kv_cache(smollm2_gguf):
    from cera_web import webapp
    from cera_web.gguf import open_gguf
    report = webapp.fit_report(open_gguf(smollm2_gguf), {"max-storage-buffer-binding-size": 1 << 30,
                                                          "max-buffer-size": 1 << 30}, context_size=2048)
    tensors = _tensors(smollm2_gguf)
    largest = max(tensors, key=lambda t: int(t.n_bytes))
    layers, kv_heads = _field(smollm2_gguf, "llama.block_count"), _field(smollm2_gguf, "llama.attention.head_count_kv")
    head_dim = _field(smollm2_gguf, "llama.embedding_length") // _field(smollm2_gguf, "llama.attention.head_count")
    assert report == {"weights": sum(int(t.n_bytes) for t in tensors), "kv_cache": 2 * layers * 2048 * kv_heads *
                      head_dim * 4, "largest_tensor": largest.name, "largest_bytes": int(largest.n_bytes),
                      "buffer_limit": 1 << 30, "split": []}
    # LFM2: only its attention layers (head_count_kv > 0) have a KV cache
    path = SMALL / "lfm2-q8_0.gguf"
    kv = [int(k) for k in _field(path, "lfm2.attention.head_count_kv")]
    head_dim = _field(path, "lfm2.embedding_length") // _field(path, "lfm2.attention.head_count")
    report = webapp.fit_report(open_gguf(path), {}, context_size=100)
    assert report["kv_cache"] == 2 * sum(kv) * 100 * head_dim * 4 and 0 < sum(k > 0 for k in kv) < len(kv)


@pytest.mark.parametrize("limit_key", ["max-storage-buffer-binding-size", "max-buffer-size"])
def test_fit_report_splits_big_tensors_and_refuses_what_cannot_fit(smollm2_gguf, limit_key):
    from cera_web import webapp
    from cera_web.errors import UnsupportedModelError
    from cera_web.gguf import open_gguf
    from cera_web.models.base import SPLIT_ROWS
    tensors = {t.name: t for t in _tensors(smollm2_gguf)}
    emb = tensors["token_embd.weight"]
    name = {"max-storage-buffer-binding-size": "maxStorageBufferBindingSize", "max-buffer-size": "maxBufferSize"}
    limits = {"max-storage-buffer-binding-size": 1 << 30, "max-buffer-size": 1 << 30, limit_key: 16_000_000}
    # the 30 MB embedding (tied LM head) is over the limit: split, everything else whole
    report = webapp.fit_report(open_gguf(smollm2_gguf), limits)
    assert int(emb.n_bytes) > 16_000_000 and report["split"] == ["token_embd.weight"]
    assert report["buffer_limit"] == 16_000_000
    # a limit below SPLIT_ROWS rows of the widest-rowed matrix: refused, naming it, needed vs available
    row_bytes = {n: int(t.n_bytes) // int(t.shape[1]) for n, t in tensors.items() if len(t.shape) == 2}
    widest = max(row_bytes, key=row_bytes.get)
    need = row_bytes[widest] * SPLIT_ROWS
    limits[limit_key] = need - 1
    with pytest.raises(UnsupportedModelError) as info:
        webapp.fit_report(open_gguf(smollm2_gguf), limits, context_size=16)
    msg = str(info.value)
    assert f"'{widest}'" in msg and name[limit_key] in msg and f"needed {need} bytes, available {need - 1}" in msg
    limits[limit_key] = need          # just enough: every matrix but the smallest is split
    report = webapp.fit_report(open_gguf(smollm2_gguf), limits, context_size=16)
    assert set(report["split"]) == {n for n in row_bytes if tensors[n].n_bytes > need}
    # one layer's K (or V) cache must fit whole: 2048 positions x 3 KV heads x 64 floats = 1.5 MiB
    limits[limit_key] = 1_000_000
    with pytest.raises(UnsupportedModelError, match="KV cache for 2048 tokens .* needed 1572864 bytes, available "
                                                    "1000000; load it with a smaller context size"):
        webapp.fit_report(open_gguf(smollm2_gguf), limits, context_size=2048)


def _check(prefix_of, total, name="m.gguf", limits=None):
    """Run check_header the way the model store does: show it more bytes until it is satisfied."""
    from cera_web import webapp
    limits = limits or {"max-storage-buffer-binding-size": 1 << 30, "max-buffer-size": 1 << 30}
    n = 1 << 20
    for _ in range(10):
        reply = json.loads(webapp.check_header(prefix_of(n), total, name, limits))
        if "need" not in reply:
            return reply, n
        assert reply["need"] > n
        n = reply["need"]
    raise AssertionError("check_header never had enough")


def test_check_header_needs_only_the_first_bytes(smollm2_gguf):
    data = Path(smollm2_gguf).read_bytes()
    header_end = min(int(t.data_offset) for t in _tensors(smollm2_gguf))
    reply, used = _check(lambda n: data[:n], len(data))
    assert reply["ok"]["weights"] == sum(int(t.n_bytes) for t in _tensors(smollm2_gguf))
    assert header_end <= used < len(data) // 20        # the header, and not much more, before the rest arrives
    # refused from the same few bytes: a KV cache over the (lowered) binding limit, cut short, not a GGUF file
    # (1 MB holds 1,302 tokens a layer: the load gets a context of 1280; 100 kB holds 130: too few, refused)
    reply, used = _check(lambda n: data[:n], len(data), limits={"max-storage-buffer-binding-size": 1_000_000,
                                                               "max-buffer-size": 1 << 30})
    assert reply["context"] == 1280 and "ok" in reply
    reply, used = _check(lambda n: data[:n], len(data), limits={"max-storage-buffer-binding-size": 100_000,
                                                               "max-buffer-size": 1 << 30})
    assert reply["error"]["kind"] == "UnsupportedModelError" and "KV cache" in reply["error"]["message"]
    assert used < len(data) // 20
    reply, _ = _check(lambda n: data[:min(n, header_end + 1000)], header_end + 1000, name="cut.gguf")
    assert reply["error"]["kind"] == "GGUFFormatError" and "truncated" in reply["error"]["message"]
    assert "cut.gguf" in reply["error"]["message"]
    reply, _ = _check(lambda n: b"<html>not found</html>"[:n], 22)
    assert reply["error"]["kind"] == "GGUFFormatError" and "not a GGUF file" in reply["error"]["message"]


@pytest.mark.gpu
@pytest.mark.parametrize("stem", ["qwen3-q8_0", "lfm2-q8_0"])
def test_memory_summary_of_a_loaded_engine(stem):
    import asyncio
    from cera_web import webapp
    from cera_web.engine import Engine
    path = SMALL / f"{stem}.gguf"
    engine = asyncio.run(Engine.load(str(path), context_size=256))
    try:
        mem = webapp.memory_summary(engine)
        arch = _field(path, "general.architecture")
        kv = _field(path, f"{arch}.attention.head_count_kv")
        kv = [int(k) for k in kv] if isinstance(kv, list) else [int(kv)] * _field(path, f"{arch}.block_count")
        fields = gguf.GGUFReader(str(path)).fields
        head_dim = (fields[f"{arch}.attention.key_length"].contents() if f"{arch}.attention.key_length" in fields
                    else _field(path, f"{arch}.embedding_length") // _field(path, f"{arch}.attention.head_count"))
        assert mem["kv_cache"] == 2 * sum(kv) * 256 * head_dim * 4
        matrices = sum(int(t.n_bytes) for t in _tensors(path) if sum(d > 1 for d in t.shape) == 2)
        if arch == "qwen3":     # every matrix is a packed weight buffer (tied LM head: the embedding, once)
            assert mem["weights"] == matrices
        else:                   # LFM2's short-convolution taps are kept as float32 with the other small buffers
            assert 0 < matrices - mem["weights"] < mem["other"]
        assert mem["total"] == mem["weights"] + mem["kv_cache"] + mem["other"]
        assert mem["total"] == sum(int(b.size) for b in engine.dev.live_buffers)
        assert mem["buffers"] == len(list(engine.dev.live_buffers))
    finally:
        engine.close()


def test_wheels_index_lists_the_wheels_to_install(server_url, repo_root):
    import tomllib
    from urllib.request import urlopen
    with urlopen(server_url + "/pyodide/wheels/index.json") as resp:
        index = json.load(resp)
    on_disk = sorted(p.name for p in (repo_root / ".assets/pyodide/wheels").glob("*.whl"))
    version = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]["version"]
    # the pinned dependencies on disk, and the cera_web wheel serve.py builds from the checkout
    assert index == {"wheels": sorted(on_disk + [f"cera_web-{version}-py3-none-any.whl"])}
    assert any(n.startswith("jinja2-") for n in on_disk)
    for name in index["wheels"]:
        with urlopen(f"{server_url}/pyodide/wheels/{name}") as resp:
            assert resp.read(4) == b"PK\x03\x04"


# -- the page ----------------------------------------------------------------------------------------------------------


@pytest.mark.browser
def test_url_download_progress_memory_cache_and_reload(tab, site, smollm2_gguf):
    """The default model: downloaded with progress (bytes, percent, rate), kept in the cache and listed, uploaded with
    progress, memory shown; a reload loads it from the cache (the server sends it once) and it generates the
    reference text; Delete empties the cache."""
    model = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    size = Path(smollm2_gguf).stat().st_size
    mb = f"{size / 1e6:.1f} MB"
    gets0, sent0 = site.gets[model], site.sent[model]     # the server is shared by the module's tests
    ranged0 = site.ranged[model]
    tab.open("?backend=webgpu")      # uploaded to the GPU from the download and from the cache
    tab.wait_ready()
    seen = tab.seen()
    downloads = [s for s in seen if s.startswith("progress-text: Downloading:")]
    assert f"progress-text: Downloading: {mb} of {mb} (100%)" in [s.split(" · ")[0] for s in downloads], seen
    assert any(re.fullmatch(rf"progress-text: Downloading: [\d.]+ MB of {re.escape(mb)} \(\d+%\) · [\d.]+ [kM]B/s", s)
               for s in downloads), downloads
    assert any(re.match(r"progress-text: Uploading weights to the GPU: [\d.]+ (MB|kB) of [\d.]+ MB \(\d+%\)", s)
               for s in seen), seen
    assert "Downloaded SmolLM2-135M-Instruct.Q4_1.gguf and kept it in the browser cache." in \
        tab.page.locator("#notice").text_content()
    assert site.gets[model] - gets0 == 1 and site.sent[model] - sent0 == size
    # the menu named it from its header by Range requests: at most 8 MiB (web/ggufmeta.js's bound), not the file
    assert 0 < site.ranged[model] - ranged0 <= 8 << 20
    # memory: weights are the file's matrices; the KV cache is 30 layers x K and V x 2048 x 192 floats
    weights = sum(int(t.n_bytes) for t in _tensors(smollm2_gguf) if sum(d > 1 for d in t.shape) == 2)
    tab.expect(tab.page.locator("#memory")).to_contain_text(
        f"weights {weights / 1e6:.1f} MB, KV cache {2 * 30 * 2048 * 192 * 4 / 1e6:.1f} MB")
    # the cache: listed with its size; in OPFS as the model and its sidecar
    tab.expect(tab.cache_items).to_have_count(1)
    tab.expect(tab.cache_items.first.locator(".name")).to_have_text("SmolLM2-135M-Instruct.Q4_1.gguf")
    tab.expect(tab.cache_items.first.locator(".size")).to_have_text(mb)
    files = tab.opfs_files()
    assert sorted(files.values())[-1] == size and len(files) == 2, files

    tab.page.reload()
    tab.wait_ready()
    assert site.gets[model] - gets0 == 1, "the reload downloaded the model again"
    seen = tab.seen()
    assert not any(s.startswith("progress-text: Downloading") for s in seen), seen
    assert any(s.startswith(f"progress-text: Checking the cached copy: {mb} of {mb} (100%)") for s in seen), seen
    tab.expect(tab.page.locator("#notice")).to_have_text(
        "Loaded SmolLM2-135M-Instruct.Q4_1.gguf from the browser cache (no download).")
    # uploaded from the cached file, it generates the reference continuation
    case = next(p for p in json.loads(SMOL_REFERENCE.read_text())["prompts"] if p["name"] == "raw_capital")
    out = tab.generate(case["prompt"], 2)
    assert out.strip() and case["greedy_text"].startswith(out), (out, case["greedy_text"])

    tab.show_drawer()
    tab.page.get_by_role("button", name="Delete SmolLM2-135M-Instruct.Q4_1.gguf").click()
    tab.expect(tab.cache_items).to_have_count(0)
    assert tab.opfs_files() == {}
    tab.assert_offline()


@pytest.mark.browser
def test_damaged_cache_entry_is_detected_and_downloaded_again(tab, site):
    stem = "qwen3-q8_0"
    url = f"/testmodels/{stem}.gguf"
    size = (SMALL / f"{stem}.gguf").stat().st_size
    gets0 = site.gets[url]      # the server is shared by the module's tests
    tab.open(f"?model={url}")
    tab.wait_ready()
    assert site.gets[url] - gets0 == 1
    # Damage four bytes of tensor data in the cached copy (the header still parses: only the checksum can tell).
    damaged = tab.page.evaluate("""async () => {
        const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('cera_web-models');
        for await (const [name, handle] of dir.entries()) {
          if (!name.endsWith('.gguf')) continue;
          const w = await handle.createWritable({keepExistingData: true});
          await w.write({type: 'write', position: 100000, data: new Uint8Array([0xde, 0xad, 0xbe, 0xef])});
          await w.close();
          return name;
        }
    }""")
    assert damaged
    tab.page.reload()
    tab.wait_ready()
    notices = [s for s in tab.seen() if s.startswith("notice:")]
    assert any(f"The cached copy of {stem}.gguf is damaged (bytes 0-{size - 1} (chunk 1 of 1) do not match their "
               f"SHA-256); downloading it again." in s for s in notices), notices
    assert site.gets[url] - gets0 == 2
    case = _small_case(stem)
    assert tab.generate(case["prompt"], len(case["greedy_ids"])) == case["text"]
    # the entry was replaced by a good copy: the next reload uses it
    tab.page.reload()
    tab.wait_ready()
    assert site.gets[url] - gets0 == 2
    tab.assert_offline()


@pytest.mark.browser
def test_local_file_by_picker_and_by_drag_and_drop(tab, site):
    tab.open("?model=/testmodels/qwen3-q8_0.gguf")
    tab.wait_ready()
    gets = sum(site.gets.values())
    # the file picker
    tab.page.get_by_label("Model file").set_input_files(str(SMALL / "lfm2-q8_0.gguf"))
    tab.expect(tab.page.locator("#model-name")).to_have_text("tiny random lfm2 258K Instruct", timeout=LOAD_MS)
    tab.expect(tab.page.locator("#model-name")).to_have_attribute("title", "lfm2-q8_0.gguf")
    tab.wait_ready()
    tab.expect(tab.page.locator("#notice")).to_contain_text("Loading lfm2-q8_0.gguf from this computer")
    case = _small_case("lfm2-q8_0")
    assert tab.generate(case["prompt"], len(case["greedy_ids"])) == case["text"]
    # drag-and-drop: a File in a DataTransfer dropped on the page
    data = base64.b64encode((SMALL / "qwen2-q8_0.gguf").read_bytes()).decode()
    overlay = tab.page.locator("#drop-overlay")
    tab.page.evaluate("""(b64) => {
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const dt = new DataTransfer();
        dt.items.add(new File([bytes], 'qwen2-q8_0.gguf'));
        for (const type of ['dragenter', 'dragover'])
          document.body.dispatchEvent(new DragEvent(type, {dataTransfer: dt, bubbles: true, cancelable: true}));
        window.__overlayShown = !document.getElementById('drop-overlay').hidden;
        document.body.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));
    }""", data)
    assert tab.page.evaluate("window.__overlayShown")
    tab.expect(overlay).to_be_hidden()
    tab.expect(tab.page.locator("#model-name")).to_have_text("tiny random qwen2 150K Instruct", timeout=LOAD_MS)
    tab.expect(tab.page.locator("#model-name")).to_have_attribute("title", "qwen2-q8_0.gguf")
    tab.wait_ready()
    case = _small_case("qwen2-q8_0")
    assert tab.generate(case["prompt"], len(case["greedy_ids"])) == case["text"]
    # local files are read where they are: nothing was fetched, nothing was cached
    assert sum(site.gets.values()) == gets
    tab.expect(tab.cache_items).to_have_count(1)    # the URL model only
    # back to the cached model, from the list: no download
    tab.show_drawer()
    tab.page.get_by_role("button", name="Open qwen3-q8_0.gguf").click()
    tab.expect(tab.page.locator("#model-name")).to_have_text("tiny random qwen3 167K Instruct", timeout=LOAD_MS)
    tab.expect(tab.page.locator("#model-name")).to_have_attribute("title", "qwen3-q8_0.gguf")
    tab.wait_ready()
    tab.expect(tab.page.locator("#notice")).to_have_text("Loaded qwen3-q8_0.gguf from the browser cache (no download).")
    assert sum(site.gets.values()) == gets
    tab.assert_offline()


@pytest.mark.browser
def test_embedding_over_the_binding_limit_is_split_and_generates(tab, site):
    """A device that binds at most 8 MB (lowered by ?max_binding): the 30 MB embedding table, which is also the LM
    head, goes up as 4 buffers of row ranges; the page says so and generates the reference continuation."""
    tab.open("?max_binding=8000000&backend=webgpu")
    tab.wait_ready()
    tab.expect(tab.page.locator("#memory")).to_contain_text("token_embd.weight split into 4 buffers")
    case = next(p for p in json.loads(SMOL_REFERENCE.read_text())["prompts"] if p["name"] == "raw_capital")
    out = tab.generate(case["prompt"], 6)
    assert len(out.strip()) > 4 and case["greedy_text"].startswith(out), (out, case["greedy_text"])
    tab.assert_offline()


@pytest.mark.browser
def test_model_that_cannot_fit_is_refused_before_the_download(tab, site, smollm2_gguf):
    """A device that binds at most 100 kB (lowered by ?max_binding) holds one layer's KV cache for 130 tokens only,
    too few to offer a smaller context (loading.auto_context: 256 at least), so not its 1.5 MiB at the page's 2048
    tokens: the page says so, with the bytes needed and available, after a small part of the file; nothing is
    cached."""
    model = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    size = Path(smollm2_gguf).stat().st_size
    sent_before = site.sent[model]     # the server is shared by the module's tests
    tab.open("?max_binding=100000&backend=webgpu")
    try:
        tab.expect(tab.alert).to_have_attribute("data-kind", "UnsupportedModelError", timeout=LOAD_MS)
        tab.expect(tab.alert).to_contain_text("This model cannot run here: ")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{tab.diagnostics()}") from None
    tab.expect(tab.alert).to_contain_text("KV cache for 2048 tokens")
    tab.expect(tab.alert).to_contain_text(f"needed {2048 * 3 * 64 * 4} bytes, available 100000;")
    tab.expect(tab.alert).to_contain_text("maxStorageBufferBindingSize")
    tab.expect(tab.status).to_have_text("Loading failed: see the error below.")
    tab.expect(tab.page.get_by_role("button", name="Send")).to_be_disabled()
    # The page reads the first MiB(s), refuses, and cancels the download. What the server has read from the file by
    # then also counts what the socket and the browser's network buffers took ahead of the page: up to ~27 MB on a
    # loaded 2-core box (the check runs Python in Pyodide while bytes keep arriving). A page that did not cancel would
    # have sent the whole file; half of it is the bound.
    sent = site.sent[model] - sent_before
    assert 0 < sent < size // 2, f"{sent} of {size} bytes were sent"
    assert tab.opfs_files() == {}
    tab.show_drawer()
    tab.expect(tab.cache_items).to_have_count(0)
    tab.assert_offline()


# -- the notebook ---------------------------------------------------------------------------------------------------


def _set_cell(p, index: int, code: str):
    """Replace the code of the index-th editable cell, as a person typing in it would."""
    p.evaluate("""([i, code]) => {
        document.querySelectorAll('script[type^="py-editor"]:not([setup])')[i].code = code;
    }""", [index, code])


@pytest.mark.browser
def test_notebook_cells_load_a_model_and_stream_generations(tab, site):
    p = tab.page
    p.goto(site.url + "/web/notebook.html")
    run_buttons = p.locator(".py-editor-run-button")
    outputs = p.locator(".py-editor-output")
    tab.expect(run_buttons).to_have_count(8, timeout=60_000)

    def run(i, until, timeout=LOAD_MS):
        run_buttons.nth(i).click()
        try:
            tab.expect(outputs.nth(i).filter(has_text=until).or_(outputs.nth(i).filter(has_text="Error"))
                        ).to_be_visible(timeout=timeout)
        except AssertionError as e:
            raise AssertionError(f"{e}\n" + "\n".join(tab.console[-30:])) from None
        text = outputs.nth(i).inner_text()
        assert "Error" not in text, text
        return text

    # a cell that uses a name no cell has defined yet: one line, no traceback, and what to run first
    _set_cell(p, 3, "print(engine)")
    run_buttons.nth(3).click()
    tab.expect(outputs.nth(3)).to_have_text("NameError: name 'engine' is not defined (run the cell that defines "
                                            "engine first, e.g. \"1. Load the model\")", timeout=LOAD_MS)

    # the load cell, pointed at a tiny model (the default one takes minutes to generate with on a CPU), and the
    # generation cell started right after it, while it loads: it waits for the load, then greedy generation streams
    # the reference text into its output
    case = _small_case("qwen3-q8_0")
    n = len(case["greedy_ids"])
    _set_cell(p, 0, "from cera_web.webapp import open_model, stream, memory_summary\n\n"
                    "engine = await open_model('/testmodels/qwen3-q8_0.gguf')")
    _set_cell(p, 1, f"result = await stream(engine, {case['prompt']!r}, max_tokens={n})")
    run_buttons.nth(0).click()
    text = run(1, "tok/s")
    assert outputs.nth(1).locator(".cera-stream").text_content() == case["text"]
    text0 = outputs.nth(0).inner_text()
    assert "Downloaded qwen3-q8_0.gguf and kept it in the browser cache." in text0
    assert re.search(r"download: 0\.2 MB of 0\.2 MB \(100%\)", text0), text0
    assert re.search(r"tiny random qwen3 167K Instruct \(qwen3-q8_0\.gguf\) on .*: GPU memory [\d.]+ MB \(weights 0\.2 MB, KV cache [\d.]+ MB", text0)
    assert "parse" not in text0, text0      # steps' progress lines go once the model is loaded
    tab.expect(p.locator("#boot")).to_have_text("Python is ready: run the cells.")
    _set_cell(p, 3, "for part, size in memory_summary(engine).items():\n    print(f\"{part:>9}: {size:,}\")")
    assert re.search(rf"\n{n} tokens, max_tokens; prefill [\d.]+ tok/s, decode [\d.]+ tok/s", text), text
    # change the parameters and run again: sampled with a seed, twice the same
    _set_cell(p, 1, f"result = await stream(engine, {case['prompt']!r}, max_tokens=6, temperature=1.0, seed=7)")
    run(1, "tok/s")
    first = outputs.nth(1).locator(".cera-stream").text_content()
    run(1, "tok/s")
    assert outputs.nth(1).locator(".cera-stream").text_content() == first
    weights = sum(int(t.n_bytes) for t in _tensors(SMALL / "qwen3-q8_0.gguf") if sum(d > 1 for d in t.shape) == 2)
    assert run(3, "buffers").startswith(f"  weights: {weights:,}\n")
    tab.assert_offline()


def test_notebook_constrained_decoding_validates_in_the_browser(tab, site):
    """Structured output in Pyodide + WebGPU (SwiftShader): a tiny random model's outputs under a JSON schema
    (greedy and seeded) and a GBNF grammar are complete and valid (cera_web.grammar, sample.wgsl's mask path)."""
    import json

    import jsonschema
    p = tab.page
    p.goto(site.url + "/web/notebook.html")
    run_buttons = p.locator(".py-editor-run-button")
    outputs = p.locator(".py-editor-output")
    tab.expect(run_buttons).to_have_count(8, timeout=60_000)
    schema = {"enum": ["red", "green", "blue", 7, None]}
    grammar = 'root ::= "{\\"ok\\": " ("true" | "false") "}"'
    _set_cell(p, 0, "import json\nfrom cera_web.webapp import open_model\n"
                    "engine = await open_model('/testmodels/qwen3-q8_0.gguf')\n"
                    f"fmt = {{'type': 'json_schema', 'json_schema': {{'name': 's', 'schema': {schema!r}}}}}\n"
                    "rs = [await engine.generate('Colour:', max_tokens=12, response_format=fmt),\n"
                    "      await engine.generate('Colour:', max_tokens=12, response_format=fmt, temperature=1.0, seed=5),\n"
                    f"      await engine.generate('Ok?', max_tokens=12, grammar={grammar!r}, temperature=1.0, seed=2)]\n"
                    "print('RESULTS:' + json.dumps([[r.text, r.stop_reason] for r in rs]))")
    run_buttons.nth(0).click()
    done = outputs.nth(0).filter(has_text="RESULTS:").or_(outputs.nth(0).filter(has_text="Error"))
    try:
        tab.expect(done).to_be_visible(timeout=LOAD_MS)
    except AssertionError as e:
        raise AssertionError(f"{e}\n" + "\n".join(tab.console[-30:])) from None
    text = outputs.nth(0).inner_text()
    assert "Error" not in text, text
    results = json.loads(text.split("RESULTS:", 1)[1].strip().splitlines()[0])
    for out, reason in results[:2]:
        assert reason in ("grammar", "eos"), results
        jsonschema.validate(json.loads(out), schema)
    assert results[2][1] in ("grammar", "eos") and json.loads(results[2][0])["ok"] in (True, False), results


def _notebook_cells() -> list[str]:
    """The code of web/notebook.html's editable cells, as written."""
    html = (ROOT / "web" / "notebook.html").read_text(encoding="utf-8")
    return [part.split("</script>", 1)[0].strip("\n") for part in html.split('<script type="py-editor" env="cera">')[1:]]


def test_notebook_json_schema_and_tool_call_cells_run(tab, site):
    """Cells 5 and 6 (the OpenAI-shaped API: a json_schema reply, a tool call run and answered) as written, on the
    tiny random model: with its whitespace tokens banned (logit_bias; it otherwise fills JSON's optional whitespace)
    the tool's city an enum (its strings never end by themselves) and more tokens for the call, the reply completes and validates, and the
    call parses, runs the function and gets an answer. SmolLM2's own replies to these requests are checked by
    tests/test_jsapi.py and tests/test_openai_api.py."""
    import jsonschema
    from cera_web.gguf import open_gguf
    from cera_web.tokenizer import Tokenizer
    p = tab.page
    p.goto(site.url + "/web/notebook.html")
    run_buttons, outputs = p.locator(".py-editor-run-button"), p.locator(".py-editor-output")
    tab.expect(run_buttons).to_have_count(8, timeout=60_000)
    tk = Tokenizer.from_gguf(open_gguf(SMALL / "qwen3-q8_0.gguf"))
    ban = {t: -100 for t in range(tk.vocab_size) if tk.token_bytes(t) and not tk.token_bytes(t).strip()}
    assert ban
    cells = _notebook_cells()
    schema_cell, tool_cell = cells[4], cells[5]
    assert schema_cell.count("temperature=0") == 1 and tool_cell.count("temperature=0") == 2
    assert "def get_weather(city: str," in tool_cell and "max_tokens=64" in tool_cell
    _set_cell(p, 0, "from cera_web.webapp import open_model\nengine = await open_model('/testmodels/qwen3-q8_0.gguf')")
    _set_cell(p, 4, f"BAN = {ban!r}\n" + schema_cell.replace("temperature=0", "temperature=0, logit_bias=BAN"))
    _set_cell(p, 5, f"BAN = {ban!r}\n" + tool_cell.replace("temperature=0", "temperature=0, logit_bias=BAN")
              .replace("max_tokens=64", "max_tokens=160")     # its tokens are a character or two
              .replace("def get_weather(city: str,", 'def get_weather(city: Literal["Paris", "Rome"],'))

    def run(i, until):
        run_buttons.nth(i).click()
        try:
            tab.expect(outputs.nth(i).filter(has_text=until).or_(outputs.nth(i).filter(has_text="Error"))
                        ).to_be_visible(timeout=LOAD_MS)
        except AssertionError as e:
            raise AssertionError(f"{e}\n" + "\n".join(tab.console[-30:])) from None
        text = outputs.nth(i).inner_text()
        assert "Error" not in text, text
        return text

    run(0, "GPU memory")
    text = run(4, re.compile(r"parsed: |cut short: "))
    assert "finish_reason: stop" in text, text
    person = json.loads(text.split("parsed: ", 1)[1].splitlines()[0])
    jsonschema.validate(person, {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3}},
        "required": ["name", "age", "hobbies"]})
    text = run(5, re.compile(r"answer: |no complete call"))
    m = re.search(r"^call: get_weather (\{.*\})$", text, re.M)
    assert m and re.match(r"\{'city': '(Paris|Rome)'(, 'unit': '[CF]')?\}$", m.group(1)), text
    assert re.search(r"^answer: ", text, re.M), text




# {size, first bytes} of the notebook's saved chat (OPFS cera_web-notebook/NAME.snap), read apart from the page's code
SAVED_CHAT = """async (name) => {
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('cera_web-notebook');
    const file = await (await dir.getFileHandle(name + '.snap')).getFile();
    return {size: file.size, head: Array.from(new Uint8Array(await file.slice(0, 8).arrayBuffer()))};
}"""

# After the reload: no such chat, a bad name, a state kept for another context size, a full disk (each write refused)
NOTEBOOK_CHAT_EDGES = """import json
from pyodide.code import run_js
from cera_web.errors import InputError
from cera_web.notebook import load_chat, open_model, save_chat
print("MISSING:", await load_chat(engine, "nothing"))
try:
    await save_chat(chat, "../library")
except InputError as e:
    print("BAD NAME:", e)
other = await open_model('/testmodels/qwen3-q8_0.gguf', context_size=1024)
stale = await load_chat(other, "library")
print("STALE:", [m["role"] for m in stale.messages])
run_js("FileSystemWritableFileStream.prototype.write = "
       "() => Promise.reject(new DOMException('no room', 'QuotaExceededError'))")
try:
    await save_chat(chat, "library")
except InputError as e:
    print("FULL:", e)
print("RESULT:{}")
"""


@pytest.mark.browser
def test_notebook_saved_chat_goes_on_after_a_reload(tab, site):
    """Cells 7 and 8 (save_chat / load_chat, issue 29) as written, on the tiny model with a shorter setup prompt,
    greedy, 4 tokens a reply: the chat goes to OPFS as the snapshot's own bytes; after a reload the load cell restores
    it, and its next reply prefills only the new message (cached_tokens: the tokens restored) and equals the reply
    of the same chat continued without the reload (computed by the page before the reload). Then: no such chat gives
    None, a bad name and a full disk one-line InputErrors (the kept file unchanged), a state kept for another
    context size the conversation without it."""
    p = tab.page
    save_cell, load_cell = _notebook_cells()[6:8]
    settings, loading = "max_tokens=48, temperature=0", 'chat = await load_chat(engine, "library")'
    assert save_cell.count(settings) == 1 and load_cell.count(settings) == 1 and loading in load_cell
    fast = "max_tokens=4, temperature=0, ignore_eos=True"
    report = ('\nimport json\nprint("RESULT:" + json.dumps({"text": reply.text, "prompt": len(reply.prompt_tokens), '
              '"cached": reply.cached_tokens}))')
    setup = re.search(r'^SETUP = """(.*?)"""$', save_cell, re.S | re.M).group(1)
    short = "\n".join(setup.splitlines()[:5])     # a few hundred of the tiny model's tokens (its pieces are short)
    run_buttons, outputs = p.locator(".py-editor-run-button"), p.locator(".py-editor-output")

    def run(i, code):
        _set_cell(p, i, code)
        run_buttons.nth(i).click()
        try:
            tab.expect(outputs.nth(i).filter(has_text="RESULT:").or_(outputs.nth(i).filter(has_text="Error"))
                        ).to_be_visible(timeout=LOAD_MS)
        except AssertionError as e:
            raise AssertionError(f"{e}\n" + "\n".join(tab.console[-30:])) from None
        text = outputs.nth(i).inner_text()
        assert "Error" not in text, text
        return text, json.loads(text.split("RESULT:", 1)[1].splitlines()[0])

    def boot():
        tab.expect(run_buttons).to_have_count(8, timeout=60_000)
        _set_cell(p, 0, "from cera_web.notebook import open_model\n"
                        "engine = await open_model('/testmodels/qwen3-q8_0.gguf')")
        run_buttons.nth(0).click()

    p.goto(site.url + "/web/notebook.html")
    boot()
    text, first = run(6, save_cell.replace(setup, short).replace(settings, fast) + report)
    saved = re.search(r"^Saved chat 'library' in this browser: [\d.]+ [kM]B, 3 messages, (\d+) tokens of prompt "
                      r"cache kept\.$", text, re.M)
    assert saved, text
    kept = int(saved.group(1))
    assert first["prompt"] > 300 and kept >= first["prompt"], (first, kept)   # the setup prompt and its first turn
    file = p.evaluate(SAVED_CHAT, "library")
    assert bytes(file["head"]) == b"CERAKV\x00\x01" and file["size"] > kept * 64, file    # the bytes, not base64
    # the reference: the same chat, continued in this session
    _, reference = run(7, load_cell.replace(settings, fast).replace(loading, "chat = chat") + report)
    assert reference["cached"] == kept, reference

    p.reload()
    boot()
    text, second = run(7, load_cell.replace(settings, fast) + report)
    assert f"Restored chat 'library': 3 messages, {kept} tokens of prompt cache: the next message prefills only " \
           "itself.\n" in text, text
    assert second["cached"] == kept and second["prompt"] == reference["prompt"], (second, reference)
    new = second["prompt"] - second["cached"]       # only the new turn was prefilled: as without the reload
    assert new == reference["prompt"] - reference["cached"] and new < first["prompt"] // 4, (second, reference)
    assert second["text"] == reference["text"], (second, reference)
    assert f"(prefilled {new} prompt tokens, {kept} from the saved prompt cache)" in text, text

    text, _ = run(1, NOTEBOOK_CHAT_EDGES)
    assert "No chat saved as 'nothing' in this browser: save one with `await save_chat(chat, 'nothing')`.\n" \
           "MISSING: None\n" in text, text
    assert "BAD NAME: a chat's name is 1 to 100 letters, digits, '-', '_' or '.', got '../library'\n" in text, text
    assert "Chat 'library' (3 messages) is back without its prompt cache: the snapshot was made with a context of " \
           "2048 tokens, this engine has 1024: the conversation is kept, its next turn recomputes the prompt\n" \
           "STALE: ['system', 'user', 'assistant']\n" in text, text
    assert re.search(r"^FULL: could not save the chat as cera_web-notebook/library\.snap: the browser's storage for "
                     r"this site is full: [^\n]+$", text, re.M), text
    assert p.evaluate(SAVED_CHAT, "library") == file      # the failed write left the kept chat as it was
    tab.assert_offline()
