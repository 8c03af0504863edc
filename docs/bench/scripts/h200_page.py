"""The page in headless Chromium on a real GPU (issue 26): called by h200_page.sh on the H200, one step at a time.

    python3 h200_page.py probe OUTDIR            try the flag sets below in order; for each, the WebGPU adapter that
                                                 navigator.gpu.requestAdapter() returns and chrome://gpu's text;
                                                 the first set whose adapter is not a fallback (CPU) one is written to
                                                 /tmp/pg_flags.json and used by the steps below
    python3 h200_page.py page [bench_browser.py args]   tests/bench_browser.py unchanged, with the chosen flags
    python3 h200_page.py wllama MODEL WLLAMA_DIR [--prompt 512 --decode 128 --decode-after 16 --repeats 3]
                                                 wllama (llama.cpp compiled to wasm, its WebGPU backend, every layer on
                                                 the GPU), in the same browser with the same flags, on the same token
                                                 ids as cera_web.tools.bench; one JSON object (llama.cpp's own timings)

CHROMIUM (env, default /opt/pgx/chromium): the browser to start (h200_page.sh writes a wrapper there that sets
LD_LIBRARY_PATH to the bundled libraries the machine lacks and sends Chromium's stderr to $PG_CHROME_LOG).
wllama is a measuring tool only: it is unpacked on the device from `npm pack`, nothing of it is in this repository.
"""
import functools
import http.server
import json
import re
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHROMIUM = os.environ.get("CHROMIUM", "/opt/pgx/chromium")
FLAGS_FILE = Path(os.environ.get("PG_FLAGS_FILE", "/tmp/pg_flags.json"))   # PG_FLAGS_FILE: another set (wllama: f16)

# In order of preference. The base (tests/conftest.py's CHROMIUM_ARGS: --enable-unsafe-webgpu --no-sandbox, no
# network) is always there; these are added after it.
FLAG_SETS = {
    # Headless Chromium forces SwiftShader for GL unless --enable-gpu (or --use-gl / --use-angle) is given, and then
    # WebGPU offers only SwiftShader's fallback adapter; Dawn's Vulkan backend needs the Vulkan feature on Linux.
    # On the H200 (session 12, BENCHMARKS.md) none of these gave the GPU: with --enable-gpu, ANGLE's default GL wants
    # an X display and Chromium's Vulkan instance fails (vkCreateInstance -7) under headless Ozone; --use-angle=vulkan
    # puts GL on the GPU but WebGPU still gets SwiftShader (with the Vulkan feature too: a crashing GPU process or a
    # null adapter); --use-angle=gl-egl gives Dawn an OpenGL ES adapter on the GPU in compatibility mode only.
    "gpu-vulkan": ["--enable-gpu", "--enable-features=Vulkan", "--ignore-gpu-blocklist", "--enable-logging=stderr"],
    "gpu-vulkan-angle-egl": ["--enable-gpu", "--enable-features=Vulkan", "--use-gl=angle", "--use-angle=gl-egl",
                             "--ignore-gpu-blocklist", "--enable-logging=stderr"],
    "gpu-vulkan-no-surface": ["--enable-gpu", "--enable-features=Vulkan", "--use-vulkan=native",
                              "--disable-vulkan-surface", "--disable-features=SkiaGraphite", "--ignore-gpu-blocklist",
                              "--enable-logging=stderr"],
    "angle-vulkan": ["--use-angle=vulkan", "--ignore-gpu-blocklist", "--enable-logging=stderr"],
    "gpu": ["--enable-gpu", "--ignore-gpu-blocklist", "--enable-logging=stderr"],
    "gpu-vulkan-graphite": ["--enable-gpu", "--enable-features=Vulkan,SkiaGraphite", "--ignore-gpu-blocklist",
                            "--enable-logging=stderr"],
    "vulkan-angle-vulkan": ["--enable-features=Vulkan", "--use-angle=vulkan", "--use-vulkan=native",
                            "--disable-vulkan-surface", "--ignore-gpu-blocklist", "--enable-logging=stderr"],
    "webgpu": ["--ignore-gpu-blocklist", "--enable-logging=stderr"],
}

PROBE_JS = """async () => {
  const timeout = new Promise((res) => setTimeout(() => res({error: 'requestAdapter/requestDevice: no answer in 25 s'}), 25000));
  return await Promise.race([timeout, (async () => {
  const out = {secure: isSecureContext, has_gpu: !!navigator.gpu, user_agent: navigator.userAgent};
  try {
    const a = await navigator.gpu.requestAdapter({powerPreference: 'high-performance'});
    if (!a) { out.adapter = null; return out; }
    const i = a.info || {};
    out.info = {vendor: i.vendor, architecture: i.architecture, device: i.device, description: i.description,
                subgroupMinSize: i.subgroupMinSize, subgroupMaxSize: i.subgroupMaxSize,
                isFallbackAdapter: i.isFallbackAdapter,
                subgroupMatrixConfigs: [...(i.subgroupMatrixConfigs || [])].map((c) => ({
                  componentType: c.componentType, resultComponentType: c.resultComponentType, M: c.M, N: c.N, K: c.K}))};
    out.features = [...a.features].sort();
    const l = {};
    for (const k of ['maxBufferSize', 'maxStorageBufferBindingSize', 'maxComputeWorkgroupStorageSize',
                     'maxComputeInvocationsPerWorkgroup', 'maxComputeWorkgroupSizeX', 'maxStorageBuffersPerShaderStage'])
      l[k] = a.limits[k];
    out.limits = l;
    const d = await a.requestDevice();
    out.device_ok = !!d;
    d.destroy();
  } catch (e) { out.error = String(e); }
  return out;
  })()]);
}"""

GPU_PAGE_JS = """() => {
  const walk = (n) => {
    let t = n.shadowRoot ? walk(n.shadowRoot) : '';
    for (const c of n.childNodes) {
      if (c.nodeType === 1 && (c.tagName === 'STYLE' || c.tagName === 'SCRIPT')) continue;
      if (c.nodeType === 3) t += c.textContent;
      else if (c.nodeType === 1 || c.nodeType === 11) t += walk(c) + (['DIV', 'TR', 'P', 'H3', 'LI'].includes(c.tagName) ? '\\n' : ' ');
    }
    return t;
  };
  return walk(document.body);
}"""


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static files with the headers a page needs for SharedArrayBuffer (wllama's threads) and wasm's MIME type."""
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm",
                      ".js": "text/javascript", ".mjs": "text/javascript", ".json": "application/json"}

    def end_headers(self):
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, *a):
        pass


def _serve(folder):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _base_args():
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from conftest import CHROMIUM_ARGS
    return list(CHROMIUM_ARGS)


def probe(outdir):
    from playwright.sync_api import sync_playwright
    outdir = Path(outdir)
    folder = Path("/tmp/pg_probe")
    folder.mkdir(exist_ok=True)
    (folder / "index.html").write_text("<!doctype html><title>probe</title><p>probe</p>")
    server, url = _serve(folder)
    base, results, chosen = _base_args(), {}, None
    with sync_playwright() as pw:
        for name, extra in FLAG_SETS.items():
            row = {"flags": base + extra}
            t0 = time.time()
            try:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=base + extra, headless=True, timeout=60000)
                try:
                    page = browser.new_page()
                    page.goto(url + "/index.html")
                    row["adapter"] = page.evaluate(PROBE_JS)
                    try:
                        page.goto("chrome://gpu")
                        page.wait_for_timeout(2500)
                        row["chrome_gpu"] = page.evaluate(GPU_PAGE_JS)[:30000]
                    except Exception as e:      # noqa: BLE001 - the probe records, it does not judge
                        row["chrome_gpu_error"] = str(e)[:300]
                finally:
                    browser.close()
            except Exception as e:      # noqa: BLE001
                row["error"] = str(e)[:2000]
            row["seconds"] = round(time.time() - t0, 1)
            results[name] = row
            info = (row.get("adapter") or {}).get("info") or {}
            print(name, json.dumps(info), row.get("error", "")[:300], flush=True)
            if info and not info.get("isFallbackAdapter") and info.get("architecture") != "swiftshader" \
                    and (row.get("adapter") or {}).get("device_ok"):
                chosen = name
                break
    server.shutdown()
    results["chosen"] = chosen
    (outdir / "probe.json").write_text(json.dumps(results, indent=1))
    if chosen:
        FLAGS_FILE.write_text(json.dumps({"name": chosen, "args": base + FLAG_SETS[chosen]}))
    print("chosen:", chosen)
    return 0 if chosen else 3


def _chosen_args():
    if FLAGS_FILE.exists():
        return json.loads(FLAGS_FILE.read_text())["args"]
    return _base_args() + FLAG_SETS["webgpu"]


def page(argv):
    """tests/bench_browser.py as it is, with conftest's browser and flags replaced by the chosen ones."""
    args = _chosen_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    import conftest
    conftest.CHROMIUM = CHROMIUM
    conftest.CHROMIUM_ARGS = args
    import bench_browser
    sys.argv = ["bench_browser.py"] + argv
    bench_browser.main()


WLLAMA_HTML = """<!doctype html><meta charset="utf-8"><title>wllama bench</title>
<pre id="status">starting</pre><pre id="result"></pre>
<script type="module">
import { Wllama } from '/wllama/esm/index.js';
const status = (t) => { document.getElementById('status').textContent = t; };
const logs = [];
const keep = (level) => (...a) => { const s = a.map(String).join(' '); if (logs.length < 3000) logs.push(level + ' ' + s); };
async function main() {
  const cfg = await (await fetch('/ids.json')).json();
  const w = new Wllama({default: '/wllama/esm/wasm/wllama.wasm'},
                       {logger: {debug: keep('debug'), log: keep('log'), info: keep('info'), warn: keep('warn'),
                                 error: keep('error')}});
  status('loading');
  const t0 = performance.now();
  const blob = await (await fetch('/model.gguf')).blob();
  await w.loadModel([blob], {n_gpu_layers: 999, n_ctx: cfg.n_ctx, n_batch: 512, n_ubatch: 512});
  const loadMs = performance.now() - t0;
  const webgpu = w.isSupportWebGPU();
  const comp = (p, n) => w.createCompletion({prompt: p, max_tokens: n, temperature: 0, ignore_eos: true,
                                             cache_prompt: false});
  await comp(cfg.warm, 4);                        // warm-up, as cera_web.tools.bench
  const runs = [];
  for (let r = 0; r < cfg.repeats; r++) {
    status('run ' + r);
    let a = performance.now();
    const pre = await comp(cfg.text_prompt, 1);  // prefill + first token
    const ttft = performance.now() - a;
    a = performance.now();
    const dec = await comp(cfg.text_decode, cfg.decode);
    const wall = performance.now() - a;
    runs.push({prefill_tok_s: +pre.timings.prompt_per_second.toFixed(1), prompt_n: pre.timings.prompt_n,
               ttft_ms: +ttft.toFixed(2), decode_tok_s: +dec.timings.predicted_per_second.toFixed(1),
               predicted_n: dec.timings.predicted_n,
               decode_wall_tok_s: +(dec.timings.predicted_n / ((wall - dec.timings.prompt_ms) / 1000)).toFixed(1),
               text: dec.choices[0].text.slice(0, 80)});
  }
  const best = runs.reduce((x, y) => (y.decode_tok_s > x.decode_tok_s ? y : x));
  document.getElementById('result').textContent = JSON.stringify({
    engine: 'wllama ' + cfg.wllama_version + ' (llama.cpp wasm, WebGPU backend, n_gpu_layers 999)',
    prompt_tokens: cfg.prompt, decode_tokens: cfg.decode, decode_after: cfg.decode_after, n_ctx: cfg.n_ctx,
    load_ms: +loadMs.toFixed(1), webgpu_supported: webgpu, multi_thread: self.crossOriginIsolated, ...best,
    prefill_tok_s_runs: runs.map((r) => r.prefill_tok_s), decode_tok_s_runs: runs.map((r) => r.decode_tok_s),
    runs, log_lines: logs.length, log: logs.filter((s) => !/ - kv /.test(s) && /gpu|offload|backend|device|adapter|ggml|load_tensors|layers|buffer|error|warn/i.test(s)).slice(0, 80)});
  status('done');
}
main().catch((e) => { status('error'); document.getElementById('result').textContent = 'ERROR ' + e + '\\n' + logs.slice(-40).join('\\n'); });
</script>"""


def wllama(argv):
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("wllama_dir", help="the npm package's folder (with esm/)")
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--decode", type=int, default=128)
    p.add_argument("--decode-after", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout-s", type=float, default=400)
    a = p.parse_args(argv)
    sys.path[:0] = [str(ROOT)]
    from cera_web.tools.bench import prompt_ids
    from cera_web.gguf import open_gguf
    from cera_web.tokenizer import Tokenizer
    tok = Tokenizer.from_gguf(open_gguf(a.model))
    ids = prompt_ids(tok, max(a.prompt, a.decode_after))
    wdir = Path(a.wllama_dir)
    version = json.loads((wdir / "package.json").read_text())["version"]
    folder = Path("/tmp/pg_wllama")
    folder.mkdir(exist_ok=True)
    for name, target in (("wllama", wdir), ("model.gguf", Path(a.model).resolve())):
        if not (folder / name).exists():
            (folder / name).symlink_to(target)
    (folder / "index.html").write_text(WLLAMA_HTML)
    # wllama's completion takes text only (a token list is refused): the text of the same ids; llama.cpp counts
    # its own tokens (prompt_n), which can differ by a few where the repeated text's joins merge.
    (folder / "ids.json").write_text(json.dumps({"warm": tok.decode(ids[:8]), "text_prompt": tok.decode(ids[:a.prompt]),
                                                 "text_decode": tok.decode(ids[:a.decode_after]), "prompt": a.prompt, "decode": a.decode,
                                                 "decode_after": a.decode_after, "repeats": a.repeats,
                                                 "n_ctx": -(-max(2048, a.prompt + a.decode, a.decode_after + a.decode) // 256) * 256,
                                                 "wllama_version": version}))
    from playwright.sync_api import sync_playwright
    server, url = _serve(folder)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=_chosen_args(), headless=True)
        page = browser.new_page()
        console = []
        page.on("console", lambda m: console.append(m.text[:300]) if len(console) < 2000 else None)
        page.goto(url + "/index.html")
        page.wait_for_function("document.getElementById('result').textContent.length > 0",
                               timeout=a.timeout_s * 1000)
        text = page.text_content("#result")
        browser.close()
    server.shutdown()
    if text.startswith("ERROR"):
        sys.exit(text + "\n" + "\n".join(console[-30:]))
    out = json.loads(text)
    out["console_lines"] = len(console)
    out["console"] = [c for c in console if re.search(r"gpu|offload|backend|adapter|device|vulkan|nvidia", c, re.I)][:80]
    out["model"] = Path(a.model).name
    out["browser"] = "headless Chromium (" + CHROMIUM + ")"
    print(json.dumps(out))


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "probe":
        sys.exit(probe(rest[0]))
    elif cmd == "page":
        page(rest)
    elif cmd == "wllama":
        wllama(rest)
    else:
        sys.exit(__doc__)
