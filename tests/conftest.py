"""Fixtures shared by the whole suite.

    repo_root     Path of the checkout
    smollm2_gguf  Path of the default model (SmolLM2-135M-Instruct Q4_1), fetched first if missing
    server_url    "http://127.0.0.1:PORT" (no trailing slash) of serve.py's server, running in a thread
                  for the session, with all non-optional assets fetched
    browser       a headless Playwright Chromium (/usr/bin/chromium) with WebGPU enabled, per session
    page          a fresh browser context and page per test (closed afterwards)
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# Decode products with 8-bit activations (matvec_q8, issue 13) move SmolLM2's logits by up to ~0.5, and a real GPU
# picks them by default: the tests that hold the engine to float32 references (1e-4) run the f32 kernels on every
# adapter; tests/test_matvec_q8.py forces the int8 path with its own stated tolerances. CERA_WEB_INT8=1 in the
# environment still wins (running the whole suite on the int8 path).
os.environ.setdefault("CERA_WEB_INT8", "0")
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))  # for `import serve`

CHROMIUM = "/usr/bin/chromium"

# Measured with Chromium 156 headless on a machine without a GPU: with these flags
# navigator.gpu.requestAdapter() on a page served from http://127.0.0.1 returns the SwiftShader fallback
# adapter (info.vendor "google", info.architecture "swiftshader", isFallbackAdapter true; features include
# subgroups and timestamp-query, not shader-f16; maxBufferSize and maxStorageBufferBindingSize 1 GiB) and
# requestDevice() succeeds. --enable-unsafe-webgpu is the one that matters; --disable-gpu-sandbox is not
# needed; --no-sandbox is needed when running as root. navigator.gpu exists only in secure contexts:
# http://127.0.0.1 is one, about:blank is not. The rest keep Chromium from talking to the network.
CHROMIUM_ARGS = [
    "--enable-unsafe-webgpu",
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    from cera_web.tools.assets import default_model_path

    return default_model_path(ensure=True)


@pytest.fixture(scope="session")
def server_url():
    import serve
    from cera_web.tools.assets import ensure_assets

    ensure_assets()
    server = serve.make_server("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, name="cera_web test server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install it (Debian: apt-get install chromium), or run "
                    f"python3 tests/run.py as root, which does")
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        pw.stop()


@pytest.fixture
def page(browser):
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def cancel_in_prefill(monkeypatch):
    """cancel_in_prefill(engine): from now on each prefill chunk of engine's model runs, then cancels the engine
    (as a person pressing Stop while the prompt is processed would); returns the list of chunk positions run."""
    def patch(engine):
        model, real, calls = engine.model, engine.model.prefill, []

        def prefill(ids, pos0, with_head):
            calls.append(pos0)
            real(ids, pos0, with_head)
            engine.cancel()

        monkeypatch.setattr(model, "prefill", prefill)
        return calls
    return patch


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", default=False,
                     help="also run the tests marked slow (long real-model tests that repeat what a faster test "
                          "covers; the default run, and CI's, leave them out to stay within the CI time budget)")


def pytest_collection_modifyitems(config, items):
    """Leave out the tests marked slow unless --all (or CERA_WEB_ALL_TESTS=1) or -m names markers; then run the
    browser tests last. Fast tests fail first; and while the session's Playwright (sync API) is running it keeps an
    asyncio loop in the main thread, so tests that call asyncio.run() must not come after it starts."""
    if not (config.getoption("--all") or os.environ.get("CERA_WEB_ALL_TESTS") == "1" or config.getoption("-m")):
        # a test asked for by its id (relative to the root, or an absolute path) runs
        named = [os.path.relpath(a, config.rootpath) if os.path.isabs(a) else a for a in config.args if "::" in a]
        slow = [i for i in items if i.get_closest_marker("slow") and not any(i.nodeid.startswith(a) for a in named)]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [i for i in items if i not in slow]
    uses_browser = [i for i in items if "browser" in getattr(i, "fixturenames", ())]
    others = [i for i in items if "browser" not in getattr(i, "fixturenames", ())]
    items[:] = others + uses_browser
