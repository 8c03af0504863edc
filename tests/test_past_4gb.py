"""Models past 4 GB (issue 30 item 4).

Fast (default run): how a weight larger than one GPU buffer is split into row ranges (models/base.py
GPUModel.pieces), at its exact bounds; and the CPU path's refusal, in the browser, of weights wasm32 cannot hold.

Slow (--all): a synthetic Llama-3.1-8B-shape Q4_K_M file (4.6 GB, written once by bench.synthetic_path) loads in
the page in headless Chromium, from its URL by Range requests and from the browser's cache (OPFS), and generates a
token each time, while the worker's JS heap and Python's wasm heap stay under 10% of the file; its embedding table
is split by a lowered maxBufferSize.
"""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from cera_web.errors import UnsupportedModelError
from cera_web.gguf import GGMLType, TensorInfo
from cera_web.models.base import GPUModel
from cera_web.models.memory import SPLIT_ROWS

MiB = 1 << 20


def split(rows: int, row_bytes: int, limits: dict, offset: int = 4096):
    """GPUModel.pieces of one (row_bytes x rows) tensor under ``limits``: [(first row, rows, file segments)]."""
    info = TensorInfo("w", (row_bytes, rows), GGMLType.Q8_0, offset, rows * row_bytes, rows * row_bytes)
    model = object.__new__(GPUModel)
    model.gguf = SimpleNamespace(tensor=lambda name: info)
    model.dev = SimpleNamespace(limits=limits)
    model._pieces, model.weights = {}, {}
    model.aligned = lambda name: False
    made = []

    def weight_buffer(fmt, segments, label, aligned):
        made.append(segments)
        return SimpleNamespace(size=sum(n for _, n in segments), label=label)

    model._weight_buffer = weight_buffer
    parts = model.pieces("w")
    return [(r0, n, segs) for (_, r0, n), segs in zip(parts, made, strict=True)]


def check_split(rows: int, row_bytes: int, limit: int, limits: dict):
    """The pieces cover the rows in order, each starts at a multiple of SPLIT_ROWS rows, holds its own bytes of the
    file and fits ``limit``; there are as few as those rules allow, and one when the tensor fits."""
    got = split(rows, row_bytes, limits)
    assert [r0 for r0, _, _ in got] == [sum(n for _, n, _ in got[:i]) for i in range(len(got))]
    assert sum(n for _, n, _ in got) == rows
    for r0, n, segs in got:
        assert segs == [(4096 + r0 * row_bytes, n * row_bytes)]
        assert r0 % SPLIT_ROWS == 0 and n * row_bytes <= limit
    most = limit // row_bytes // SPLIT_ROWS * SPLIT_ROWS      # rows one piece may hold
    assert len(got) == (1 if rows * row_bytes <= limit else -(-rows // most)), (rows, row_bytes, limit, got)
    return got


# (rows, bytes a row): Llama-3.1-8B's embedding/head as Q6_K (128256 x 4096: 3360 bytes a row) and as Q4_K (2304),
# a short odd row, and a row count that is no multiple of SPLIT_ROWS
SHAPES = [(128256, 3360), (128256, 2304), (1000, 34), (4099, 18)]


@pytest.mark.parametrize("rows,row_bytes", SHAPES)
def test_split_at_its_bounds(rows, row_bytes):
    nbytes = rows * row_bytes
    piece = SPLIT_ROWS * row_bytes
    for limit in (nbytes, nbytes + 1, nbytes - 1, nbytes // 2, nbytes // 2 + 1, nbytes // 3 - 1, piece, piece + 1,
                  2 * piece - 1, 2 * piece, 256 * MiB, 256 * MiB - 1):
        if limit < piece or nbytes // limit > 300:    # the big tables' 16-row pieces: the small shapes' cases
            continue
        got = check_split(rows, row_bytes, limit, {"max-storage-buffer-binding-size": limit,
                                                   "max-buffer-size": limit})
        if limit >= nbytes:
            assert got == [(0, rows, [(4096, nbytes)])]
    with pytest.raises(UnsupportedModelError, match=f"{SPLIT_ROWS} rows"):   # not even SPLIT_ROWS rows fit
        split(rows, row_bytes, {"max-storage-buffer-binding-size": piece - 1, "max-buffer-size": 1 << 40})


def test_split_by_max_buffer_size():
    """A buffer may not exceed maxBufferSize even where the binding limit is larger (and the other way round): the
    8B's Q6_K embedding table (411 MiB) in two pieces under 256 MiB, none at the 1 GiB SwiftShader gives."""
    rows, row_bytes = 128256, 3360
    for limits in ({"max-storage-buffer-binding-size": 1 << 30, "max-buffer-size": 256 * MiB},
                   {"max-storage-buffer-binding-size": 256 * MiB, "max-buffer-size": 1 << 30}):
        got = check_split(rows, row_bytes, 256 * MiB, limits)
        assert [(r0, n) for r0, n, _ in got] == [(0, 64128), (64128, 64128)]
    assert len(split(rows, row_bytes, {"max-storage-buffer-binding-size": 1 << 30, "max-buffer-size": 1 << 30})) == 1


def test_cpu_path_refused_past_the_wasm_heap(tmp_path, monkeypatch):
    """In the browser a CPU load whose weights wasm32 cannot hold is refused in one line before any weight is read
    (here with the bound lowered to the tiny model's size); natively the same load goes on."""
    from cera_web import loading, preflight
    from cera_web.tools import bench
    path = bench.synthetic_llama(tmp_path / "m.gguf", "smollm2-135m", "q4_1", layers=1, vocab=300)
    plan = asyncio.run(loading.plan_load(path, device="cpu"))
    need = loading.cpu_weight_bytes(plan.gguf)
    monkeypatch.setattr(preflight, "HEAP_BYTES", need - 1)
    asyncio.run(loading.plan_load(path, device="cpu"))     # natively: no such bound
    monkeypatch.setattr(loading, "IN_BROWSER", True)
    with pytest.raises(UnsupportedModelError) as e:
        asyncio.run(loading.plan_load(path, device="cpu"))
    assert "\n" not in str(e.value) and "the browser's WebAssembly memory" in str(e.value), e.value
    assert "load it on the GPU" in str(e.value)
    monkeypatch.setattr(preflight, "HEAP_BYTES", need)
    asyncio.run(loading.plan_load(path, device="cpu"))



@pytest.mark.browser
def test_page_reads_an_uncached_model_by_range_requests(page, server_url):
    """load with cache false: the worker checks the header and loads the default model by Range requests (no
    download into memory, nothing kept in OPFS), then generates; the small model takes the CPU path, which reads
    its weights through the same RangeSource."""
    page.goto(server_url + "/blank")          # any same-origin document: the test talks to the worker itself
    page.evaluate(START_WORKER)
    page.evaluate("(m) => w.postMessage(m)", {"type": "load", "url": "/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                                              "cache": False})
    ready = _wait(page, _answer("ready"), 120_000)
    assert ready["origin"] == "server", ready
    page.evaluate("(m) => w.postMessage(m)", {"type": "generate", "id": 1, "prompt": "Hello", "max_tokens": 3})
    done = _wait(page, _answer("done", 1), 60_000)
    assert done["text"] and len(done["tokens"]) == 3, done
    notices = [m["text"] for m in page.evaluate("msgs") if m.get("type") == "notice"]
    assert any("a part at a time (not cached: caching is off)" in n for n in notices), notices
    page.evaluate("(m) => w.postMessage(m)", {"type": "cache-list"})
    assert _wait(page, _answer("cache"), 10_000)["entries"] == []


def _wait(page, done, timeout_ms: int):
    for _ in range(timeout_ms // 100):
        got = done(page.evaluate("msgs"))
        if got:
            return got
        page.wait_for_timeout(100)
    raise AssertionError(f"nothing after {timeout_ms / 1000:.0f} s: {page.evaluate('msgs')[-5:]}")


# -- the page: a 4.6 GB model (slow) ------------------------------------------------------------------------------------

BIG = "/synthetic/big.gguf"        # bench.synthetic_path("llama-3.1-8b", "q4_k_m"), served by big_site
SPLIT_AT = 256 * MiB                # maxBufferSize lowered to this: the 411 MiB embedding table/LM head is split
STEP_MS = 900_000                   # the longest a load or a one-token generation may take on SwiftShader here

# The worker the page runs (web/worker.js), started from a blank same-origin document, its messages collected.
START_WORKER = """() => {
    window.msgs = [];
    window.w = new Worker('/web/worker.js');
    w.onmessage = (e) => msgs.push(e.data);
}"""


@pytest.fixture(scope="module")
def big_site():
    """serve.py's server (Range requests, ETag), plus the 8B-shape file at BIG; counts whole-file and Range bytes."""
    import threading

    import serve
    from cera_web.tools import bench
    from cera_web.tools.assets import ensure_assets

    ensure_assets()
    big = bench.synthetic_path("llama-3.1-8b", "q4_k_m")     # written once (~45 s), kept in <temp>/cera_web_synthetic
    sent = {"whole": 0, "ranged": 0}

    class Handler(serve.Handler):
        def _resolve(self):
            return big if self.path.split("?", 1)[0] == BIG else super()._resolve()

        def _send_body(self, fh, size, ctype, etag, mtime, head):
            kind = "ranged" if self.headers.get("Range") else "whole"

            class Counted:
                def seek(self, n):
                    fh.seek(n)

                def read(self, n):
                    data = fh.read(n)
                    sent[kind] += len(data)
                    return data
            super()._send_body(Counted(), size, ctype, etag, mtime, head)

    server = serve.AppServer(("127.0.0.1", 0), serve.ROOT, False)
    server.RequestHandlerClass = Handler
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield SimpleNamespace(url=f"http://127.0.0.1:{server.server_address[1]}", size=big.stat().st_size, sent=sent)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class HeapWatch:
    """The worker's JS heap through the DevTools protocol (Runtime.getHeapUsage on the worker's target): V8's heap
    plus the ArrayBuffers' backing stores, which hold any bytes read from a file, polled while waiting."""

    def __init__(self, context, page):
        import json
        self.json, self.page = json, page
        self.cdp = context.new_cdp_session(page)
        self.replies, self.n, self.peak, self.samples = {}, 0, {}, 0
        self.cdp.on("Target.receivedMessageFromTarget", self._reply)
        self.session, self.seen = None, set()

    def _reply(self, event):
        msg = self.json.loads(event["message"])
        if "id" in msg:
            self.replies[msg["id"]] = msg.get("result")

    def attach(self):
        """Watch the worker started last (call after starting one): the one target not watched before."""
        for _ in range(100):
            new = [t["targetId"] for t in self.cdp.send("Target.getTargets")["targetInfos"] if t["type"] == "worker"
                   and t["url"].endswith("/web/worker.js") and t["targetId"] not in self.seen]
            if new:
                break
            self.page.wait_for_timeout(100)
        self.seen.add(new[0])
        self.session = self.cdp.send("Target.attachToTarget", {"targetId": new[0], "flatten": False})["sessionId"]

    def sample(self):
        self.n += 1
        self.cdp.send("Target.sendMessageToTarget", {"sessionId": self.session, "message": self.json.dumps(
            {"id": self.n, "method": "Runtime.getHeapUsage"})})

    def wait(self, done, timeout_ms: int, what: str):
        """Poll the heap every ~0.25 s until done(messages) gives a message; return it."""
        import time
        end = time.monotonic() + timeout_ms / 1000
        while time.monotonic() < end:
            self.sample()
            self.page.wait_for_timeout(250)
            for result in self.replies.values():
                if result:
                    self.samples += 1
                    for k in ("usedSize", "backingStorageSize"):
                        self.peak[k] = max(self.peak.get(k, 0), int(result.get(k, 0)))
                    self.peak["js"] = max(self.peak.get("js", 0),
                                          int(result.get("usedSize", 0)) + int(result.get("backingStorageSize", 0)))
            self.replies.clear()
            got = done(self.page.evaluate("msgs"))
            if got:
                return got
        raise AssertionError(f"{what}: nothing after {timeout_ms / 1000:.0f} s; messages: "
                             f"{self.page.evaluate('msgs')[-5:]}")


def _answer(kind: str, rid=None):
    """done(messages) for HeapWatch.wait: the first message of type ``kind`` (of request ``rid``), or an error."""
    def done(msgs):
        for m in msgs:
            if m.get("type") == "error":
                raise AssertionError(f"error: {m}")
            if m.get("type") == kind and (rid is None or m.get("id") == rid):
                return m
        return None
    return done


@pytest.mark.slow
@pytest.mark.browser
def test_8b_model_past_4gb_loads_in_the_page(browser, big_site):
    """The 4.6 GB file: (1) not cached, read from its server by Range requests as it uploads, generates a token;
    (2) in a new worker, downloaded into OPFS (hashed per chunk as it arrives) and uploaded from there, generates a
    token; (3) in a third, asked for the CPU path: the cached copy is checked (its hashes read back chunk by chunk)
    and the CPU path refused in one line (wasm32 cannot hold it). Throughout, the worker's JS heap (V8 heap and
    ArrayBuffers) and Pyodide's wasm memory stay under 10% of the file; the embedding table (411 MiB, the tied LM
    head) is split under a maxBufferSize lowered to 256 MiB. The browser profile is on disk (a fresh context's quota
    is too small for 4.6 GB). Measurements go to $CERA_WEB_PAST_4GB_JSON if set."""
    import json
    import os
    import shutil
    import tempfile
    import time

    from conftest import CHROMIUM, CHROMIUM_ARGS

    size, ceiling = big_site.size, big_site.size // 10
    assert size > 4 << 30
    profile = tempfile.mkdtemp(prefix="cera_web_past_4gb_")
    context = browser.browser_type.launch_persistent_context(profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                                             headless=True)
    page = context.new_page()
    page.goto(big_site.url + "/blank")      # any same-origin document: the test talks to the worker itself
    watch = HeapWatch(context, page)
    runs = {}
    try:
        for run, cache in (("range", False), ("opfs", True)):
            page.evaluate(START_WORKER)
            page.wait_for_timeout(200)
            watch.attach()
            watch.peak = {}
            t0 = time.monotonic()
            page.evaluate("(m) => w.postMessage(m)", {"type": "load", "url": BIG, "cache": cache, "backend": "auto",
                                                      "limits": {"max-buffer-size": SPLIT_AT}})
            ready = watch.wait(_answer("ready"), STEP_MS, f"{run} load")
            t1 = time.monotonic()
            page.evaluate("(m) => w.postMessage(m)", {"type": "generate", "id": 1, "prompt": "a", "max_tokens": 1})
            done = watch.wait(_answer("done", 1), STEP_MS, f"{run} generation")
            t2 = time.monotonic()
            wasm = int(done["memory"]["wasm_heap"])      # Pyodide's wasm memory: it only grows, so this is its peak
            runs[run] = {"origin": ready["origin"], "backend": ready["backend_kind"], "split": ready["split"],
                         "load_s": round(t1 - t0, 1), "first_token_s": round(t2 - t1, 1), "wasm_heap": wasm,
                         "js_heap_peak": watch.peak, "heap_samples": watch.samples,
                         "tokens": done.get("completion_tokens", done.get("tokens")),
                         "notices": [m["text"] for m in page.evaluate("msgs") if m.get("type") == "notice"]}
            print(run, json.dumps(runs[run]))
            assert ready["backend_kind"] == "webgpu", ready      # 'auto' on SwiftShader: the GPU (CPU path: refused)
            assert ready["origin"] == ("server" if run == "range" else "download"), ready
            assert "token_embd.weight" in json.dumps(ready["split"]), ready["split"]
            # Issue 30's 10% for both heaps on both paths. The JS heap's peak would count ArrayBuffers not yet
            # collected: the download is read by a BYOB reader into one reused buffer, and each 16 MiB slice read
            # for upload (and each chunk the check reads back) is detached once copied, so what remains is what is
            # live: 1.0-1.3% of the file measured (before, 7.9% on the Range path and 12.4% on the OPFS path).
            assert wasm < ceiling and watch.peak["js"] < ceiling, runs[run]
            page.evaluate("w.terminate()")            # its GPU memory goes with it
        assert big_site.sent["whole"] >= size and big_site.sent["ranged"] >= size, big_site.sent   # once each way

        page.evaluate(START_WORKER)                    # (3) from the cache, on the CPU path: checked, then refused
        page.wait_for_timeout(200)
        watch.attach()
        watch.peak = {}
        t0 = time.monotonic()
        page.evaluate("(m) => w.postMessage(m)", {"type": "load", "url": BIG, "backend": "cpu"})

        def refused(msgs):
            return next((m for m in msgs if m.get("type") in ("error", "ready")), None)
        err = watch.wait(refused, STEP_MS, "cpu load")
        notices = [m["text"] for m in page.evaluate("msgs") if m.get("type") == "notice"]
        runs["cpu_refused"] = {"verify_s": round(time.monotonic() - t0, 1), "js_heap_peak": watch.peak,
                               "message": err.get("message"), "notices": notices}
        print("cpu", json.dumps(runs["cpu_refused"]))
        assert err["type"] == "error" and err["kind"] == "UnsupportedModelError", err
        assert "\n" not in err["message"] and "WebAssembly memory" in err["message"], err
        assert any("from the browser cache" in n for n in notices), notices
        assert watch.peak["js"] < ceiling, runs["cpu_refused"]
    finally:
        context.close()
        shutil.rmtree(profile, ignore_errors=True)
        out = os.environ.get("CERA_WEB_PAST_4GB_JSON")
        if out:
            with open(out, "w") as f:
                json.dump({"file_bytes": size, "ceiling": ceiling, "runs": runs}, f, indent=1)
