"""Browser benchmark of the API from JavaScript (web/cera.js -> worker -> engine), as one JSON object.

    python tests/bench_jsapi.py [--max-tokens 64] [--runs 2] [--model URL]

Starts serve.py's server on a free port, opens /web/api.html in headless Chromium (/usr/bin/chromium; WebGPU on
whatever adapter it finds: SwiftShader without a GPU), which loads the model through cera.js, then times greedy
streamed chat completions (ignore_eos, so each makes max_tokens tokens): load_s, and per run the time to the first
content chunk, the chunks and tokens, and tok/s as cera.js sees them (wall clock between the request and its last
chunk, prefill included; the first run also pays for first-use pipeline compiles on some drivers); with
--json-schema the same under a JSON schema (constrained decoding). Not part of the
test suite (speed is measured, not asserted); run it with the test environment's python (.venv/bin/python).
"""
import argparse
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

RUN = """async ([params, runs]) => {
    const out = [];
    for (let i = 0; i < runs; i++) {
        const t0 = performance.now();
        let first = null, chunks = 0, last = null;
        for await (const c of await cera.chat.completions.create({...params, stream: true})) {
            chunks++;
            if (first === null && c.choices[0].delta.content) first = performance.now() - t0;
            last = c;
        }
        const s = (performance.now() - t0) / 1000;
        const tokens = last.usage.completion_tokens;
        out.push({first_chunk_ms: first, chunks, tokens, prompt_tokens: last.usage.prompt_tokens, seconds: s,
                  tok_s: tokens / s, finish_reason: last.choices[0].finish_reason});
    }
    return out;
}"""


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--model", help="a GGUF URL on the server (default: the page's, SmolLM2)")
    p.add_argument("--json-schema", action="store_true", help="constrain the reply to a JSON schema")
    p.add_argument("--timeout-s", type=float, default=3600)
    args = p.parse_args()
    import serve
    from conftest import CHROMIUM, CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    from cera_web.tools.assets import ensure_assets
    ensure_assets(quiet=True)
    server = serve.make_server("127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/web/api.html" + (f"?model={args.model}" if args.model else "")
    params = {"messages": [{"role": "user", "content": "Tell me a long story about a dragon."}],
              "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True}
    if args.json_schema:
        params["response_format"] = {"type": "json_schema", "json_schema": {"name": "story", "schema": {
            "type": "object", "properties": {"title": {"type": "string"}, "story": {"type": "string"}},
            "required": ["title", "story"]}}}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page()
        t0 = time.monotonic()
        page.goto(url)
        page.wait_for_function("/^(Ready|Loading failed)/.test(document.getElementById('status').textContent)",
                               timeout=args.timeout_s * 1000)
        status = page.text_content("#status")
        if not status.startswith("Ready"):
            sys.exit(status)
        load_s = time.monotonic() - t0
        runs = page.evaluate(RUN, [params, args.runs])
        info = page.evaluate("({model: cera.info.file, backend: cera.info.backend})")
        browser.close()
    server.shutdown()
    print(json.dumps({"what": "cera.js streamed chat completions", **info, "load_s": load_s,
                      "json_schema": args.json_schema, "max_tokens": args.max_tokens, "runs": runs,
                      "browser": "headless Chromium (" + CHROMIUM + ")"}))


if __name__ == "__main__":
    main()
