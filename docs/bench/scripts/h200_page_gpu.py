"""The page in Chromium on the H200 under a carried Xvfb (issue 26; sessions 13, 15, 16): called by h200_page_gpu.sh
(session 13's h200_s13_page.py and session 15's h200_s15_page.py, merged).

    python3 h200_page_gpu.py probe OUTDIR      launch Chromium once per flag set below (headed on Ozone X11 under
                                               $DISPLAY, or headless); for each, navigator.gpu.requestAdapter()'s
                                               info, features and limits and chrome://gpu's text, into
                                               OUTDIR/probe.json. The first set (in this order) whose adapter is a
                                               real GPU's is chosen for the steps below (/tmp/pg_flags.json).
                                               PG_PROBE=one (session 15's): only CHOSEN, then every set if it fails
    python3 h200_page_gpu.py page [tests/bench_browser.py args]     tests/bench_browser.py unchanged (its --model
                                               picks the file), in the chosen browser mode and flags
    python3 h200_page_gpu.py wllama MODEL WLLAMA_DIR [h200_page.py wllama args]
                                               h200_page.py's wllama runner (every layer on WebGPU) likewise
    python3 h200_page_gpu.py repredict ESTIMATE.jsonl [MODELS_DIR]
                                               predicted.json's table with this checkout's estimate() from each row's
                                               recorded micro-benchmark (no GPU: checks calibration constants)
    python3 h200_page_gpu.py tag ENGINE MODEL [ARGS] < bench.json    one line of a .jsonl: the bench's JSON (its
                                               last line) with {"engine", "file"} (and "args", the bench's
                                               arguments, where given) added
    python3 h200_page_gpu.py predicted estimate.jsonl    one JSON object: per line, predicted (the preflight's
                                               "estimate") and measured decode / prefill tok/s, measured/predicted,
                                               and whether the prediction is within ±35% of the measurement

Session 12 (h200_page.py) found only SwiftShader in headless Chromium: its Vulkan instance failed there
(vkCreateInstance -7, a surface extension missing under headless Ozone). Under X11, Chromium's Vulkan instance asks
for VK_KHR_xcb_surface, which NVIDIA's Vulkan driver has: hence Xvfb.
"""
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import h200_page  # noqa: E402  (the probe's page scripts, the server, the wllama runner)

CHROMIUM = h200_page.CHROMIUM
FLAGS_FILE = h200_page.FLAGS_FILE
X11 = "--ozone-platform=x11"
LOG = "--enable-logging=stderr"
BL = "--ignore-gpu-blocklist"

# (name, headless, extra flags after tests/conftest.py's CHROMIUM_ARGS), in order of preference. On the H200 (session
# 13, docs/bench/h200-s13-page-probe.json and -chromium.txt) only x11-vulkan-angle-no-surface gave the NVIDIA adapter:
# without --use-angle=vulkan ANGLE's GL wants GLX, which the carried Xvfb lacks (no Mesa), and the GPU process exits
# (null adapter); with ANGLE on Vulkan but Vulkan surfaces on, the GPU process crashes (exit code 11; null adapter);
# headless (even on Ozone X11) gives SwiftShader, as in session 12.
FLAG_SETS = [
    ("x11-vulkan", False, [X11, "--enable-features=Vulkan", BL, LOG]),
    ("x11-vulkan-angle", False, [X11, "--enable-features=Vulkan", "--use-angle=vulkan", BL, LOG]),
    ("x11-vulkan-no-surface", False, [X11, "--enable-features=Vulkan", "--disable-vulkan-surface", BL, LOG]),
    ("x11-vulkan-angle-no-surface", False, [X11, "--enable-features=Vulkan", "--use-angle=vulkan",
                                            "--disable-vulkan-surface", BL, LOG]),
    ("x11-vulkan-graphite", False, [X11, "--enable-features=Vulkan,SkiaGraphite", BL, LOG]),
    ("x11-vulkan-from-angle", False, [X11, "--use-angle=vulkan", "--enable-features=Vulkan,VulkanFromANGLE", BL, LOG]),
    ("x11-default", False, [X11, BL, LOG]),
    ("headless-x11-vulkan", True, [X11, "--enable-features=Vulkan", BL, LOG]),
    ("headless-x11-vulkan-angle", True, [X11, "--enable-features=Vulkan", "--use-angle=vulkan", BL, LOG]),
]
# Recorded, never chosen: the compatibility adapter (GL ES underneath), which cera_web does not ask for.
COMPAT_SETS = [
    ("x11-angle-gles-compat", False, [X11, "--use-gl=angle", "--use-angle=gl-egl", BL, LOG]),
]
# Recorded, never chosen (the measurements keep the adapter users get), probed in both PG_PROBE modes: does Dawn's
# adapter toggle vulkan_enable_f16_on_nvidia give `shader-f16` on the NVIDIA adapter? Dawn (PhysicalDeviceVk.cpp,
# ValidateFeatureSupportedWithTogglesImpl) refuses ShaderF16 on every NVIDIA GPU unless that toggle is on
# (crbug.com/42251215, f16 conformance failures), though its Vulkan conditions (VK_KHR_shader_float16_int8's
# shaderFloat16, shaderInt16, storageBuffer16BitAccess, uniformAndStorageBuffer16BitAccess) hold there: why
# sessions 13 and 15 saw no shader-f16 in Chromium where wgpu-py on the same GPU has it. Chromium passes
# --enable-dawn-features to Dawn as toggles; the second set adds allow_unsafe_apis and --enable-unsafe-webgpu, in
# case this build wants them for a toggle users cannot set. PG_PROBE_F16=0 skips them (a second call's probe).
F16 = "--enable-dawn-features=vulkan_enable_f16_on_nvidia"
F16_BASE = [X11, "--enable-features=Vulkan", "--use-angle=vulkan", "--disable-vulkan-surface", BL, LOG]
F16_SETS = [
    ("x11-vulkan-angle-no-surface-f16", False, F16_BASE + [F16]),
    ("x11-vulkan-angle-no-surface-f16-unsafe", False, F16_BASE + [F16 + ",allow_unsafe_apis", "--enable-unsafe-webgpu"]),
]
# requestAdapter/requestDevice get 15 s (h200_page.py: 25): a real adapter answers in about one
PROBE_JS = h200_page.PROBE_JS.replace("25000", "15000").replace("in 25 s", "in 15 s")
COMPAT_PROBE_JS = PROBE_JS.replace("{powerPreference: 'high-performance'}",
                                   "{powerPreference: 'high-performance', featureLevel: 'compatibility'}")
# with shader-f16 offered: a device that has it, and a module with `enable f16;` compiled without errors
F16_PROBE_JS = PROBE_JS.replace("""    const d = await a.requestDevice();
    out.device_ok = !!d;""", """    const f16 = a.features.has('shader-f16');
    const d = await a.requestDevice(f16 ? {requiredFeatures: ['shader-f16']} : undefined);
    out.device_ok = !!d;
    out.device_f16 = d.features.has('shader-f16');
    if (f16) {
      const m = d.createShaderModule({code: 'enable f16;\\n@compute @workgroup_size(1) fn main() { var x: f16 = 1.5h; }'});
      out.f16_module_messages = (await m.getCompilationInfo()).messages.map((x) => x.type + ': ' + x.message);
    }""")
# The first f16 set that gives an NVIDIA device with shader-f16 and compiles the f16 module: the flags of the wllama
# step (llama.cpp's WebGPU backend requires shader-f16), not of the page's measurements (PG_FLAGS_FILE selects it).
F16_FLAGS_FILE = Path("/tmp/pg_flags_f16.json")
assert COMPAT_PROBE_JS != PROBE_JS != h200_page.PROBE_JS != F16_PROBE_JS


def _good(row):
    info = (row.get("adapter") or {}).get("info") or {}
    return bool(info) and not info.get("isFallbackAdapter") and info.get("architecture") != "swiftshader" \
        and bool((row.get("adapter") or {}).get("device_ok"))


def probe(outdir):
    from playwright.sync_api import sync_playwright
    outdir = Path(outdir)
    folder = Path("/tmp/pg_probe")
    folder.mkdir(exist_ok=True)
    (folder / "index.html").write_text("<!doctype html><title>probe</title><p>probe</p>")
    server, url = h200_page._serve(folder)
    base = h200_page._base_args()
    results = {"display": os.environ.get("DISPLAY"), "chromium": CHROMIUM}
    chosen = None
    FLAGS_FILE.unlink(missing_ok=True)
    if os.environ.get("PG_PROBE_F16", "1") == "1":
        F16_FLAGS_FILE.unlink(missing_ok=True)
    with sync_playwright() as pw:
        for (name, headless, extra), js in [(s, PROBE_JS) for s in FLAG_SETS] + \
                                           [(s, COMPAT_PROBE_JS) for s in COMPAT_SETS] + \
                                           [(s, F16_PROBE_JS) for s in F16_SETS
                                            if os.environ.get("PG_PROBE_F16", "1") == "1"]:
            row = {"flags": base + extra, "headless": headless, "compatibility": js is COMPAT_PROBE_JS,
                   "recorded_only": js is not PROBE_JS}
            t0 = time.time()
            try:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=base + extra, headless=headless,
                                             timeout=60000)
                try:
                    page = browser.new_page()
                    page.goto(url + "/index.html")
                    row["adapter"] = page.evaluate(js)
                    try:
                        page.goto("chrome://gpu")
                        page.wait_for_timeout(2500)
                        row["chrome_gpu"] = page.evaluate(h200_page.GPU_PAGE_JS)[:30000]
                    except Exception as e:      # noqa: BLE001 - the probe records, it does not judge
                        row["chrome_gpu_error"] = str(e)[:300]
                finally:
                    browser.close()
            except Exception as e:      # noqa: BLE001
                row["error"] = str(e)[:2000]
            row["seconds"] = round(time.time() - t0, 1)
            results[name] = row
            info = (row.get("adapter") or {}).get("info")
            print(name, "headless" if headless else "headed", json.dumps(info), row.get("error", "")[:300],
                  "shader-f16" in ((row.get("adapter") or {}).get("features") or []), flush=True)
            ad = row.get("adapter") or {}
            if js is F16_PROBE_JS and _good(row) and ad.get("device_f16") and not F16_FLAGS_FILE.exists() and \
                    not any(m.startswith("error") for m in ad.get("f16_module_messages") or []):
                F16_FLAGS_FILE.write_text(json.dumps({"name": name, "headless": headless, "args": base + extra}))
            if chosen is None and not row["recorded_only"] and _good(row):
                chosen = name
                FLAGS_FILE.write_text(json.dumps({"name": name, "headless": headless, "args": base + extra}))
    server.shutdown()
    results["chosen"] = chosen
    (outdir / "probe.json").write_text(json.dumps(results, indent=1))
    print("chosen:", chosen)
    return 0 if chosen else 3


def _force_mode():
    """Launch every browser in the chosen mode: bench_browser.py and h200_page.py ask for headless=True."""
    from playwright.sync_api._generated import BrowserType
    headless = json.loads(FLAGS_FILE.read_text()).get("headless", True) if FLAGS_FILE.exists() else True
    for name in ("launch", "launch_persistent_context"):    # the second: bench_browser.py --app (a profile on disk)
        def in_mode(self, *a, _launch=getattr(BrowserType, name), **kw):
            kw["headless"] = headless
            return _launch(self, *a, **kw)
        setattr(BrowserType, name, in_mode)


CHOSEN = "x11-vulkan-angle-no-surface"     # the one flag set that gave the NVIDIA adapter (sessions 13 and 15)


def probe_one(outdir):
    """Session 15's probe: CHOSEN alone, then every set if it gives no GPU adapter."""
    global FLAG_SETS, COMPAT_SETS
    all_sets, compat = FLAG_SETS, COMPAT_SETS
    FLAG_SETS, COMPAT_SETS = [s for s in all_sets if s[0] == CHOSEN], []
    rc = probe(outdir)
    if rc:
        print(f"{CHOSEN} gave no GPU adapter: probing every flag set", flush=True)
        FLAG_SETS, COMPAT_SETS = all_sets, compat
        rc = probe(outdir)
    return rc


def tag(engine, model, args=None):
    lines = [line for line in sys.stdin.read().splitlines() if line.startswith("{")]
    row = json.loads(lines[-1]) if lines else {"error": "no JSON from the bench"}
    print(json.dumps({"engine": engine, "file": model, **({"args": args} if args is not None else {}), **row}))


def predicted(path):
    rows = []
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        est = r.get("estimate") or {}
        row = {"file": r["file"], "engine": r["engine"], "backend": r.get("backend")}
        for k in ("decode_tok_s", "prefill_tok_s"):
            m, p = r.get(k), est.get(k)
            ratio = m / p if m and p else None
            row[k] = {"predicted": p, "measured": m, "measured_over_predicted": ratio and round(ratio, 3),
                      "within_35": ratio is not None and abs(p - m) <= 0.35 * m}
        rows.append(row)
    print(json.dumps({"rows": rows, "all_within_35": all(r[k]["within_35"] for r in rows
                                                         for k in ("decode_tok_s", "prefill_tok_s"))}, indent=1))


def repredict(path, models="."):
    """predicted() with the estimates recomputed by this checkout's cera_web.preflight.estimate from each row's
    recorded micro-benchmark (to check new calibration constants against a run's measurements without the GPU).
    models: the folder of the rows' files (the synthetic ones are remade by bench.synthetic_path if absent)."""
    sys.path[:0] = [str(h200_page.ROOT)]
    from cera_web import preflight as pf
    from cera_web.gguf import open_gguf
    from cera_web.models.spec import model_spec
    from cera_web.tools.bench import synthetic_path
    out = []
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        f = Path(models) / r["file"]
        if not f.exists():
            shape = r["file"].removeprefix("v2-").rsplit("-", 1)[0]
            f = synthetic_path(shape, r["file"].rsplit("-", 1)[1].removesuffix(".gguf"))
        g = open_gguf(str(f))
        spec = model_spec(g)
        after = r.get("decode_after", 16)
        r["estimate"] = pf.estimate(spec, pf.model_costs(g, spec), "webgpu", r["microbench"], r.get("chunk", 512),
                                    position=after + 64)
        out.append(json.dumps(r))
    tmp = Path("/tmp/repredicted.jsonl")
    tmp.write_text("\n".join(out) + "\n")
    predicted(tmp)


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "probe":
        sys.exit(probe_one(rest[0]) if os.environ.get("PG_PROBE", "all") == "one" else probe(rest[0]))
    elif cmd == "tag":
        tag(*rest)
    elif cmd == "predicted":
        predicted(rest[0])
    elif cmd == "repredict":
        repredict(*rest)
    elif cmd == "page":
        # The pack carries the page's assets (pyodide, pyscript, stamps), not every default asset of the commit (a
        # later one needs a pip download, and the H200 reaches no index): no check (session 15).
        import cera_web.tools.assets
        cera_web.tools.assets.ensure_assets = lambda **kw: None
        _force_mode()
        h200_page.page(rest)
    elif cmd == "wllama":
        _force_mode()
        if os.environ.get("PG_WLLAMA_ALL_LOGS"):     # every log line of llama.cpp's, not only the GPU-related ones
            old = "log: logs.filter("
            assert old in h200_page.WLLAMA_HTML
            h200_page.WLLAMA_HTML = h200_page.WLLAMA_HTML.replace(old, "log: logs.slice(0, 400), log_gpu: logs.filter(")
        h200_page.wllama(rest)
    else:
        sys.exit(__doc__)
