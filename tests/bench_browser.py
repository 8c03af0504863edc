"""Browser benchmark: the engine in headless Chromium (Pyodide + the browser's WebGPU), as one JSON object.

    python tests/bench_browser.py [--prompt-tokens 128] [--decode-tokens 128] [--steps-per-read 4] [--grammar]
                                  [--model /models/FILE.gguf] [--backend cpu [--no-cpu-kernels]]

Starts serve.py's server on a free port, opens /web/bench.html in headless Chromium (/usr/bin/chromium, WebGPU on
whatever adapter it finds: SwiftShader on a machine without a GPU) and prints what the page computed: the fields of
`python -m cera_web bench`, where api_calls_per_token counts Python→JS calls. Not part of the test suite (speed is
measured, not asserted); run it with the test environment's python (.venv/bin/python).
"""
import argparse
import json
import sys
import threading
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--decode-tokens", type=int, default=128)
    p.add_argument("--steps-per-read", type=int, default=None, help="default: adaptive, as the page")
    p.add_argument("--chunk", type=int)
    p.add_argument("--model", help="the model's URL on serve.py's server (default: the page's, SmolLM2-135M Q4_1), "
                                    "e.g. /models/gemma-3-270m-Q4_K_M.gguf for a file in .assets/models")
    p.add_argument("--grammar", action="store_true",
                   help="constrained (JSON schema) vs unconstrained decode instead (bench_grammar --decode's JSON)")
    p.add_argument("--backend", choices=("webgpu", "cpu"), default="webgpu",
                   help="cpu: the page's CPU path (Pyodide; the WebAssembly kernels where built) instead of WebGPU")
    p.add_argument("--no-cpu-kernels", action="store_true",
                   help="with --backend cpu: the float32 numpy products (the CPU path before its kernels)")
    p.add_argument("--timeout-s", type=float, default=3600)
    args = p.parse_args()
    import serve
    from conftest import CHROMIUM, CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    from cera_web.tools.assets import ensure_assets
    ensure_assets(quiet=True)
    server = serve.make_server("127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = (f"http://127.0.0.1:{server.server_address[1]}/web/bench.html?prompt={args.prompt_tokens}"
           f"&decode={args.decode_tokens}" + (f"&steps={args.steps_per_read}" if args.steps_per_read else "")
           + (f"&chunk={args.chunk}" if args.chunk else "") + ("&grammar=1" if args.grammar else "")
           + (f"&model={quote(args.model)}" if args.model else "")
           + ("&backend=cpu" if args.backend == "cpu" else "") + ("&cpu_kernels=0" if args.no_cpu_kernels else ""))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page()
        page.goto(url)
        page.wait_for_function("document.getElementById('result').textContent.length > 0",
                               timeout=args.timeout_s * 1000)
        text = page.text_content("#result")
        browser.close()
    server.shutdown()
    if text.startswith("ERROR"):
        sys.exit(text)
    out = json.loads(text)
    out["browser"] = "headless Chromium (" + CHROMIUM + ")"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
