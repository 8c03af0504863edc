"""The engine inside notebook sites Python users run in the browser (issue 27): notebooks/cera_web_jupyterlite.ipynb
in a JupyterLite site built offline here (jupyterlite-core 0.5.1, jupyterlite-pyodide-kernel 0.5.2: their kernel runs
on Pyodide 0.27.x, and it is pointed at the Pyodide serve.py serves, with micropip, ipython and the rest of what the
kernel loads pinned in assets.json). The notebook site and serve.py are two origins (two ports), serve.py started
with --cors for the notebook's, as a user's JupyterLite deployment would be.

The notebook runs as written but for its two settings (SITE: this serve.py; DEVICE: "cpu", the fast path on this
machine): it installs the served wheel with micropip, loads the default model over HTTP, streams a chat reply into
the cell output, and calls the OpenAI-style API plain and with a JSON schema. Every printed reply equals the engine's
natively on the same settings.
"""
from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import serve

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "cera_web_jupyterlite.ipynb"
RUN_MS = 420_000


def _start(root, **kw):
    server = serve.make_server("127.0.0.1", 0, root=root, **kw)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _static_host(folder):
    """A plain static file server (as a notebook site is usually hosted: no cross-origin isolation headers)."""
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (base class signature)
        pass


def _configured(site: str) -> dict:
    """The notebook with its settings cell pointed at `site` and the CPU path (the only lines changed)."""
    nb = json.loads(NOTEBOOK.read_text())
    cell = nb["cells"][1]
    source = "".join(cell["source"])
    assert source.startswith('SITE = "http://127.0.0.1:8000"') and "\nDEVICE = None " in source
    cell["source"] = source.replace('SITE = "http://127.0.0.1:8000"', f'SITE = "{site}"', 1).replace(
        "\nDEVICE = None ", '\nDEVICE = "cpu"', 1)
    return nb


@pytest.fixture(scope="module")
def jupyterlite(tmp_path_factory, server_url):
    """(notebook site URL, cera_web site URL): a JupyterLite site built offline from the pinned packages, served by a
    plain static file server (under /web/), and serve.py on the checkout allowing its origin."""
    from cera_web.tools.assets import asset_path, ensure_assets

    ensure_assets()
    root = tmp_path_factory.mktemp("jupyterlite")
    (root / "web").mkdir()
    lite_server, lite_url = _static_host(root)
    cera_server, cera_url = _start(serve.ROOT, cors=[lite_url])
    project = root / "project"
    project.mkdir()
    (project / "jupyter-lite.json").write_text(json.dumps({
        "jupyter-lite-schema-version": 0,
        "jupyter-config-data": {"litePluginSettings": {"@jupyterlite/pyodide-kernel-extension:kernel": {
            "pyodideUrl": f"{cera_url}/pyodide/pyodide.js", "disablePyPIFallback": True}}}}))
    (project / "files").mkdir()
    (project / "files" / NOTEBOOK.name).write_text(json.dumps(_configured(cera_url)))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jupyterlite_core", "build", "--lite-dir", str(project),
                    "--contents", str(project / "files"), "--piplite-wheels", str(asset_path("comm")),
                    "--output-dir", str(root / "web"), "--apps", "notebooks"],
                   check=True, cwd=project, capture_output=True, timeout=300)
    print(f"JupyterLite site built in {time.perf_counter() - t0:.1f} s")
    yield lite_url, cera_url
    for server in (lite_server, cera_server):
        server.shutdown()
        server.server_close()


def _native(smollm2_gguf) -> list[str]:
    """What the notebook's cells 2-4 print, from the engine natively on the CPU."""
    from cera_web.engine import ChatSession, Engine

    nb = json.loads(NOTEBOOK.read_text())
    schema_cell = "".join(nb["cells"][-1]["source"])
    schema = eval(schema_cell[schema_cell.index("schema = ") + 9:schema_cell.index("\nreply = ")])   # noqa: S307

    async def run():
        engine = await Engine.load(str(smollm2_gguf), device="cpu")
        try:
            pieces = []
            result = await ChatSession(engine).send("Write a haiku about the sea.", max_tokens=48, temperature=0,
                                                    on_token=lambda i, text: pieces.append(text))
            chat = "".join(pieces) + f"\n[{result.stop_reason}, {len(result.tokens)} tokens]"
            reply = await engine.chat.completions.create(
                messages=[{"role": "user", "content": "Name three colors."}], max_tokens=32, temperature=0)
            api = f"{reply['choices'][0]['message']['content']}\n{reply['usage']}"
            reply = await engine.chat.completions.create(
                messages=[{"role": "user", "content": "Describe a person as JSON."}], max_tokens=160, temperature=0,
                response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}})
            choice = reply["choices"][0]
            shaped = (f"finish_reason: {choice['finish_reason']}\n"
                      f"parsed: {json.dumps(json.loads(choice['message']['content']))}")
            return [chat, api, shaped]
        finally:
            engine.close()

    with ThreadPoolExecutor(1) as pool:        # Playwright's event loop runs in this thread
        return pool.submit(asyncio.run, run()).result()


def test_jupyterlite_notebook_runs_the_engine_from_the_served_wheel(jupyterlite, page, smollm2_gguf):
    from playwright.sync_api import expect

    lite_url, cera_url = jupyterlite
    console = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"[:300]))
    page.goto(f"{lite_url}/web/notebooks/index.html?path={NOTEBOOK.name}")
    cells = page.locator(".jp-Notebook .jp-CodeCell")
    try:
        expect(cells).to_have_count(5, timeout=60_000)
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        expect(cells.last.locator(".jp-OutputArea-output")).to_contain_text(["parsed: "], timeout=RUN_MS)
    except AssertionError as e:
        outputs = [c.inner_text() for c in page.locator(".jp-OutputArea").all()]
        errors = [line for line in console if line.startswith("error")][:10]
        raise AssertionError(f"{e}\n{outputs}\n" + "\n".join(errors + console[-30:])) from None
    out = [cells.nth(i).locator(".jp-OutputArea").inner_text().strip() for i in range(5)]
    assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count() == 0, out
    assert out[0].startswith("installed: cera_web-0.1.0-py3-none-any.whl, jinja2-"), out[0]
    assert out[1].startswith("loaded SmolLM2-135M-Instruct.Q4_1.gguf (") and out[1].endswith(" on CPU (numpy reference)"), out[1]
    assert out[2:] == _native(smollm2_gguf)


# ----------------------------------------------------------------------------- marimo

MARIMO_NOTEBOOK = ROOT / "notebooks" / "cera_web_marimo.py"


@pytest.mark.slow   # the same notebook steps as the JupyterLite test, in marimo's WASM notebook (~2 min here)
def test_marimo_notebook_runs_the_engine_from_the_served_wheel(tmp_path, page, smollm2_gguf):
    """notebooks/build_marimo_site.py's site for notebooks/cera_web_marimo.py (its settings pointed at serve.py and
    the CPU path), on a static host of its own; serve.py allows that origin."""
    from playwright.sync_api import expect

    sys.path.insert(0, str(ROOT / "notebooks"))
    import build_marimo_site

    host = tmp_path / "host"
    host.mkdir()
    lite_server, site_url = _static_host(host)
    cera_server, cera_url = _start(serve.ROOT, cors=[site_url])
    try:
        source = MARIMO_NOTEBOOK.read_text()
        assert source.count('SITE = "http://127.0.0.1:8000"') == 1 and source.count("DEVICE = None ") == 1
        notebook = tmp_path / MARIMO_NOTEBOOK.name
        notebook.write_text(source.replace('SITE = "http://127.0.0.1:8000"', f'SITE = "{cera_url}"').replace(
            "DEVICE = None ", 'DEVICE = "cpu"'))
        build_marimo_site.build(notebook, host / "site")
        console = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"[:300]))
        page.goto(site_url + "/site/")
        body = page.locator("body")
        try:
            expect(body).to_contain_text("parsed: ", timeout=RUN_MS)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{body.inner_text()[-2000:]}\n" + "\n".join(console[-30:])) from None
        text = body.inner_text()
        assert "installed: cera_web-0.1.0-py3-none-any.whl, jinja2-" in text
        assert "loaded SmolLM2-135M-Instruct.Q4_1.gguf (" in text and " on CPU (numpy reference)" in text
        for want in _native(smollm2_gguf):
            assert want in text, (want, text[-3000:])
    finally:
        for server in (lite_server, cera_server):
            server.shutdown()
            server.server_close()
