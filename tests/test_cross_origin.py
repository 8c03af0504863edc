"""Cross-origin use (issue 27): a page on one origin imports web/cera.js from serve.py on another (two ports of this
machine). With `--cors ORIGIN` the module, its worker (started through a same-origin blob shim), Pyodide, the wheel
and the model all load, and the reply equals the engine's natively; without it the import fails with the error a
user sees in the console. The page's own site is serve.py too, so it is cross-origin isolated (COEP require-corp):
the strictest case, where Pyodide's no-CORS script loads need Cross-Origin-Resource-Policy: cross-origin.

The engine runs on the CPU backend (backend: 'cpu'), the fast path on this machine: what is under test is the
loading across origins, not the kernels.
"""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import serve

PAGE = b"""<!doctype html><meta charset="utf-8"><title>another origin</title>
<script type="module">
window.ceraFrom = async (site, request) => {
  try {
    const {Cera} = await import(site + '/web/cera.js');
    const cera = await Cera.load({backend: 'cpu'});
    const reply = await cera.chat.completions.create(request);
    return {reply, isolated: self.crossOriginIsolated, model: cera.info.model};
  } catch (e) {
    return {error: `${e.name}: ${e.message}`};
  }
};
</script>
"""
REQUEST = {"messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 8, "temperature": 0}


def _start(**kw):
    server = serve.make_server("127.0.0.1", 0, **kw)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture(scope="module")
def sites(tmp_path_factory, server_url):
    """(page origin, serve.py allowing it, serve.py not allowing it): the page's site serves only web/page.html."""
    root = tmp_path_factory.mktemp("other_origin")
    (root / "web").mkdir()
    (root / "web" / "page.html").write_bytes(PAGE)
    page_server, page_origin = _start(root=root)
    cors_server, cors_url = _start(cors=[page_origin])
    yield page_origin, cors_url, server_url
    for server in (page_server, cors_server):
        server.shutdown()
        server.server_close()


def test_cera_js_from_another_origin(sites, page, smollm2_gguf):
    page_origin, cors_url, plain_url = sites
    console = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.goto(page_origin + "/web/page.html")
    # without --cors: the import is refused, and that is what the user sees
    refused = page.evaluate("([site, req]) => window.ceraFrom(site, req)", [plain_url, REQUEST])
    assert refused == {"error": f"TypeError: Failed to fetch dynamically imported module: {plain_url}/web/cera.js"}
    assert any("blocked by CORS policy" in line for line in console), console[-5:]
    # with --cors ORIGIN: the same import runs the model from the other site
    got = page.evaluate("([site, req]) => window.ceraFrom(site, req)", [cors_url, REQUEST])
    assert "error" not in got, f"{got}\n" + "\n".join(console[-20:])
    assert got["isolated"] is True and got["model"]

    from cera_web.engine import Engine

    async def native():
        engine = await Engine.load(str(smollm2_gguf), device="cpu")
        try:
            return await engine.chat.completions.create(**REQUEST)
        finally:
            engine.close()

    with ThreadPoolExecutor(1) as pool:        # Playwright's event loop runs in this thread
        want = pool.submit(asyncio.run, native()).result()
    reply = got["reply"]
    assert reply["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"]
    assert reply["usage"] == want["usage"] and reply["usage"]["completion_tokens"] == 8
