"""Browser benchmark: the engine in headless Chromium (Pyodide + the browser's WebGPU), as one JSON object.

    python tests/bench_browser.py [--prompt-tokens 128] [--decode-tokens 128] [--steps-per-read 4] [--grammar]
                                  [--model /models/FILE.gguf] [--backend cpu [--no-cpu-kernels]]
                                  [--context 4096] [--decode-after 3584] [--chat]
                                  [--lookup | --draft /models/FILE.gguf | --auto] [--repeats N]
    python tests/bench_browser.py --app [--model /models/FILE.gguf] [--backend webgpu]

Starts serve.py's server on a free port, opens /web/bench.html in headless Chromium (/usr/bin/chromium, WebGPU on
whatever adapter it finds: SwiftShader on a machine without a GPU) and prints what the page computed: the fields of
`python -m cera_web bench`, where api_calls_per_token counts Python→JS calls. Not part of the test suite (speed is
measured, not asserted); run it with the test environment's python (.venv/bin/python).

--context and --decode-after are the native bench's (KV cache positions; the decode run's prompt length, e.g. 3584
with --context 4096 to decode late in a long conversation); --chat adds the time to first token of a one-line chat
message (bench.chat_ttft, run in the page right after the load). download_ms and load_ms: the model's fetch and the
engine's load from those bytes. --lookup / --draft URL / --auto run speculative decoding's chat tasks in the page
instead (cera_web.tools.bench.speculative, as the native bench's --lookup / --draft / --auto: tok/s off and on, drafts
kept, whether the tokens are the same), --decode-tokens tokens each, the best of --repeats.

--app measures the real page (/, web/app.js and its worker) instead, in a browser profile on disk: it opens the page
with ?model=, which downloads the model into the page's cache (OPFS, web/modelstore.js) and loads it; reloads the
page, which loads it from the cache (hashes checked, then uploaded); then sends one-line chat messages (a new
conversation after Clear each) as a person would, where the model has a chat template. Its JSON:
load_download_ms / load_opfs_ms (from the page's load request to 'ready': worker start, Pyodide, download or cache
read, upload), load_download_origin / load_opfs_origin (the worker's 'download' / 'cache'), load_download_stages /
load_opfs_stages ({stage: [first, last] ms of its progress messages}: the time before the first is the worker's
start), chat_ttft_ms (the first message after the cached load: from Send to the first token shown),
chat_ttft_warm_ms (the best of the next ones) and chat_ttft_ms_runs.
"""
import argparse
import json
import sys
import tempfile
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
    p.add_argument("--context", type=int, help="KV cache positions (default: the engine's)")
    p.add_argument("--decode-after", type=int, default=16, help="the decode run's prompt length (default 16)")
    p.add_argument("--repeats", type=int, default=1, help="runs after the load, the best reported (as the native bench)")
    p.add_argument("--chat", action="store_true", help="also the time to first token of a one-line chat message")
    p.add_argument("--app", action="store_true",
                   help="the real page instead: load from a download, then from the cache (OPFS), then chat messages")
    p.add_argument("--chat-runs", type=int, default=3, help="--app: chat messages sent (default 3)")
    p.add_argument("--check", action="store_true",
                   help="also cera_web.tools.gemm_check on the page's device (its prefill products against numpy)")
    p.add_argument("--env", action="append", default=[], metavar="CERA_WEB_X=VALUE",
                   help="a kernel switch set in the page before the load (repeatable), e.g. CERA_WEB_SGMAT=0")
    p.add_argument("--lookup", action="store_true",
                   help="speculative decoding's chat tasks with prompt lookup, off and on (the native bench --lookup)")
    p.add_argument("--draft", metavar="URL", help="the same with this served model as the draft model (--draft)")
    p.add_argument("--auto", action="store_true", help="the same with the default, speculative='auto' (--auto)")
    p.add_argument("--timeout-s", type=float, default=3600)
    args = p.parse_args()
    import serve
    from conftest import CHROMIUM, CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    from cera_web.tools.assets import ensure_assets
    ensure_assets(quiet=True)
    server = serve.make_server("127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    if args.app:
        out = app(args, f"http://127.0.0.1:{server.server_address[1]}", CHROMIUM, CHROMIUM_ARGS)
        server.shutdown()
        print(json.dumps(out))
        return
    url = (f"http://127.0.0.1:{server.server_address[1]}/web/bench.html?prompt={args.prompt_tokens}"
           f"&decode={args.decode_tokens}" + (f"&steps={args.steps_per_read}" if args.steps_per_read else "")
           + (f"&chunk={args.chunk}" if args.chunk else "") + ("&grammar=1" if args.grammar else "")
           + (f"&model={quote(args.model)}" if args.model else "")
           + ("&backend=cpu" if args.backend == "cpu" else "") + ("&cpu_kernels=0" if args.no_cpu_kernels else "")
           + (f"&context={args.context}" if args.context else "") + f"&after={args.decode_after}"
            + f"&repeats={args.repeats}"
           + ("&chat=1" if args.chat else "") + ("&check=1" if args.check else "")
           + (f"&env={quote(';'.join(args.env))}" if args.env else "")
           + ("&spec=lookup" if args.lookup else "") + (f"&spec=draft&draft={quote(args.draft)}" if args.draft else "")
           + ("&spec=auto" if args.auto else ""))
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


def app(args, base, chromium, chromium_args):
    """--app: the real page's load from a download, its load from the cache after a reload, and chat messages."""
    from playwright.sync_api import sync_playwright

    from cera_web.tools.bench import CHAT_MESSAGES
    model = args.model or "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    url = f"{base}/?model={quote(model)}&backend={args.backend}"
    wait_ms = args.timeout_s * 1000
    out = {"mode": "app", "model": model}
    with tempfile.TemporaryDirectory(prefix="cera_web_bench_") as profile, sync_playwright() as pw:
        # a profile on disk, so the cache is OPFS as a person's browser keeps it (not an in-memory one)
        context = pw.chromium.launch_persistent_context(profile, executable_path=chromium, args=chromium_args,
                                                        headless=True)
        page = context.pages[0] if context.pages else context.new_page()
        for name in ("download", "opfs"):
            page.goto(url) if name == "download" else page.reload()
            page.wait_for_function("state.loadTimes && (state.loadTimes.ready_ms != null || state.loadTimes.error)",
                                   timeout=wait_ms)
            t = page.evaluate("state.loadTimes")
            if t["error"]:
                sys.exit(json.dumps({**out, "error": f"{name} load: {t['error']}"}))
            out[f"load_{name}_ms"] = round(t["ready_ms"], 1)
            out[f"load_{name}_origin"] = t["origin"]
            out[f"load_{name}_stages"] = {k: [round(v[0], 1), round(v[1], 1)] for k, v in t["stages"].items()}
        out["backend"] = page.evaluate("ui.backend.textContent")
        runs = []
        if page.evaluate("state.mode") == "chat":      # the model has a chat template
            for i in range(args.chat_runs):
                page.get_by_label("Message", exact=True).fill(CHAT_MESSAGES[i % len(CHAT_MESSAGES)])
                page.get_by_label("Max tokens").fill("8")
                page.evaluate("state.firstTokenMs = null")     # the last run's value must not end the wait
                page.get_by_role("button", name="Send", exact=True).click()
                page.wait_for_function("state.firstTokenMs != null && !state.generating", timeout=wait_ms)
                runs.append(round(page.evaluate("state.firstTokenMs"), 2))
                page.get_by_role("button", name="Clear", exact=True).click()
        out.update(chat_message=CHAT_MESSAGES[0] if runs else None, chat_ttft_ms=runs[0] if runs else None,
                   chat_ttft_warm_ms=min(runs[1:]) if runs[1:] else None, chat_ttft_ms_runs=runs)
        context.close()
    out["browser"] = "headless Chromium (" + chromium + "), the real page"
    return out


if __name__ == "__main__":
    main()
