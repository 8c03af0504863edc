"""Preflight (issue 30 items 1-2): the numbers a model's header gives before any download, checked against an
independent computation, and auto-fit's boundary.

- parameters, weights and tensor types equal the sums the `gguf` package's reader gives (a second GGUF parser); the
  KV cache equals 2 × layers × context × kv_heads × head_dim × width computed from the metadata keys themselves
- max_context is exact: the context it names fits, one more token does not, for the binding limit and for a memory
  budget (off-by-one mutants fail); auto_fit keeps what fits, takes the f16 cache where the device has shader-f16
  and f32 does not reach the context, else the largest context in 256s, and refuses with the numbers below 256
- the engine picks the f16 cache for a load that did not set one where only halves reach its context
- the scratch estimate equals what a loaded model holds besides weights and KV cache (gpu_memory), within 5%
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cera_web import preflight as pf
from cera_web.errors import UnsupportedModelError
from cera_web.gguf import open_gguf
from cera_web.models.spec import model_spec

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "tests" / "fixtures" / "small"
MODELS = ROOT / ".assets" / "models"
FILES = sorted(SMALL.glob("*.gguf")) + sorted(MODELS.glob("SmolLM2*.gguf"))     # gguf.GGUFReader: ~25 s a 150k+ vocabulary


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_numbers_match_the_gguf_package_and_the_metadata(path):
    gguf_lib = pytest.importorskip("gguf")
    reader = gguf_lib.GGUFReader(str(path))
    g = open_gguf(path)
    spec = model_spec(g)
    report = pf.preflight(g, path.stat().st_size, spec=spec, context=1000)
    assert report["params"] == sum(int(t.n_elements) for t in reader.tensors)
    assert report["weights"] == sum(int(t.n_bytes) for t in reader.tensors)
    types = {}
    for t in reader.tensors:
        n, b = types.get(t.tensor_type.name, (0, 0))
        types[t.tensor_type.name] = (n + 1, b + int(t.n_bytes))
    assert {k: (v["tensors"], v["bytes"]) for k, v in report["types"].items()} == types
    assert report["file_size"] == path.stat().st_size

    def field(key):                     # a number or an array of numbers, as a list
        f = reader.fields[key]
        return [int(f.parts[i][0]) for i in f.data]

    f = reader.fields["general.architecture"]
    arch = bytes(f.parts[f.data[0]]).decode()
    layers = field(f"{arch}.block_count")[0]
    heads = field(f"{arch}.attention.head_count")
    heads = heads[0] if len(heads) == 1 else heads
    kv = field(f"{arch}.attention.head_count_kv")
    kv = kv * layers if len(kv) == 1 else kv          # per layer (LFM2: 0 marks a convolution layer)
    head_dim = (field(f"{arch}.attention.key_length")[0] if f"{arch}.attention.key_length" in reader.fields
                else field(f"{arch}.embedding_length")[0] // (heads if isinstance(heads, int) else max(heads)))
    for width, name in ((4, "f32"), (2, "f16")):
        want = 2 * 1000 * sum(kv) * head_dim * width
        assert report["memory"][name]["kv_cache"] == want
        kept = pf.cpu_kernel_types()        # the CPU path keeps these packed, the rest as float32
        cpu_weights = sum(int(t.n_bytes) if t.tensor_type.name in kept else 4 * int(t.n_elements) for t in reader.tensors)
        assert report["memory"][name]["total"] == (cpu_weights if report["backend"] == "cpu"
                                                   else report["weights"]) + want + report["memory"][name]["scratch"]


def _small():
    g = open_gguf(SMALL / "qwen3-q8_0.gguf")
    spec = model_spec(g)
    return g, spec, pf.model_costs(g, spec)


def test_max_context_is_exact_for_the_binding_limit_and_the_budget():
    g, spec, costs = _small()
    row = spec.kv_bytes(1)[0]
    limits = {"max-storage-buffer-binding-size": row * 1000, "max-buffer-size": 1 << 40}
    for args in ((limits, "f32", "webgpu", 64, None),):
        assert pf.max_context(spec, costs, *args) == 1000
        assert pf.fits(spec, costs, args[0], 1000, *args[1:])
        assert not pf.fits(spec, costs, args[0], 1001, *args[1:])
    assert pf.max_context(spec, costs, limits, "f16", "webgpu", 64, None) == 2000
    less = dict(limits, **{"max-storage-buffer-binding-size": row * 1000 - 1})
    assert pf.max_context(spec, costs, less, "f32", "webgpu", 64, None) == 999
    # a memory budget (a probe's answer; the heap on the CPU path): weights + scratch + context × KV a token
    base = pf.memory_need(spec, costs, 0, "f32", "webgpu", 64)["total"]
    per = spec.kv_bytes(1)[1]
    budget = base + 700 * per
    big = {"max-storage-buffer-binding-size": 1 << 40, "max-buffer-size": 1 << 40}
    assert pf.max_context(spec, costs, big, "f32", "webgpu", 64, budget) == 700
    assert pf.fits(spec, costs, big, 700, "f32", "webgpu", 64, budget)
    assert not pf.fits(spec, costs, big, 701, "f32", "webgpu", 64, budget)
    assert pf.max_context(spec, costs, big, "f32", "webgpu", 64, budget - 1) == 699
    assert pf.memory_need(spec, costs, 700, "f32", "webgpu", 64)["total"] == budget
    assert pf.max_context(spec, costs, big, "f32", "webgpu", 64, base - 1) == 0


def test_auto_fit_keeps_what_fits_then_halves_then_the_largest_context():
    g, spec, costs = _small()
    row = spec.kv_bytes(1)[0]
    lim = {"max-storage-buffer-binding-size": row * 1500, "max-buffer-size": 1 << 40}
    fit = pf.auto_fit(spec, costs, limits=lim, features={"shader-f16"}, context=1500)
    assert (fit["context"], fit["kv_cache"], fit["fits"], fit["changed"]) == (1500, "f32", True, None)
    fit = pf.auto_fit(spec, costs, limits=lim, features={"shader-f16"})          # 2048 unset: halves hold 3000
    assert (fit["context"], fit["kv_cache"], fit["fits"]) == (2048, "f16", True) and "f16" in fit["changed"]
    fit = pf.auto_fit(spec, costs, limits=lim, features=set())                     # no shader-f16: 1500 -> 1280
    assert (fit["context"], fit["kv_cache"], fit["fits"]) == (1280, "f32", True)
    fit = pf.auto_fit(spec, costs, limits=lim, features=set(), context=1501)      # asked for: offered, not changed
    assert (fit["context"], fit["fits"], fit["offer"]) == (1501, False, 1280)
    fit = pf.auto_fit(spec, costs, limits=dict(lim, **{"max-storage-buffer-binding-size": row * 256}), features=())
    assert (fit["context"], fit["kv_cache"]) == (256, "f32")
    with pytest.raises(UnsupportedModelError, match=rf"256 tokens need [\d,]+ bytes .*binding limit of {row * 255:,} bytes"):
        pf.auto_fit(spec, costs, limits=dict(lim, **{"max-storage-buffer-binding-size": row * 255}), features=())
    report = pf.preflight(g, 1, limits=dict(lim, **{"max-storage-buffer-binding-size": row * 255}), backend="webgpu")
    assert report["fit"] is None and "does not fit here at any useful context" in report["refused"]
    assert pf.summary(report) == "does not fit here"


def test_the_engine_takes_halves_where_only_they_reach_the_context():
    from cera_web.gpu.native import NativeDevice
    from cera_web.loading import plan_load
    path = SMALL / "qwen3-q8_0.gguf"
    row = model_spec(open_gguf(path)).kv_bytes(1)[0]
    dev = NativeDevice.create(limits_override={"max-storage-buffer-binding-size": row * 1500})
    if "shader-f16" not in dev.features:
        dev.destroy()
        pytest.skip("this adapter has no shader-f16")
    plan = asyncio.run(plan_load(path, device=dev, kv_cache=None))
    assert (plan.kv_cache, plan.context_size) == ("f16", 2048)
    plan = asyncio.run(plan_load(path, device=dev, kv_cache=None, context_size=1024))
    assert (plan.kv_cache, plan.context_size) == ("f32", 1024)
    plan = asyncio.run(plan_load(path, device=dev))                 # set (the default "f32"): kept, fewer tokens
    assert (plan.kv_cache, plan.context_size) == ("f32", 1280)
    dev.destroy()


def test_scratch_is_what_a_loaded_model_holds_besides_weights_and_cache(smollm2_gguf):
    """Against gpu_memory of SmolLM2 loaded at chunk 64 and warmed up as on a GPU, its verify pass's logits made (its
    file's vectors: counted as weights by the preflight, as other buffers by gpu_memory)."""
    from cera_web.engine import Engine
    from cera_web.models.memory import gpu_memory
    g = open_gguf(smollm2_gguf)
    spec = model_spec(g)
    costs = pf.model_costs(g, spec)
    eng = asyncio.run(Engine.load(smollm2_gguf, context_size=512, chunk=64))
    try:
        asyncio.run(eng.warm_up())      # as a load on a GPU does (software adapters skip it)
        held = gpu_memory(eng.model)
        need = pf.memory_need(spec, costs, 512, "f32", "webgpu", 64)
        assert need["kv_cache"] == held["kv_cache"]
        assert abs(need["total"] - held["total"]) <= 0.05 * held["other"] + (need["weights"] - held["weights"])
        assert abs(need["scratch"] - held["other"]) <= 0.25 * held["other"]
    finally:
        eng.close()


def test_the_page_shows_the_preflight_and_refuses_what_cannot_fit_before_any_download(browser, server_url):
    """The chat page (tiny model loaded on SwiftShader's WebGPU, the binding limit lowered to 100,000 bytes with
    ?max_binding: no served model holds 256 tokens of KV cache a layer there): opening "Will it run here?" lists every
    served model with its verdict and numbers, read from headers by Range requests only; picking one that cannot fit
    shows why, with the numbers, and downloads nothing."""
    pytest.importorskip("playwright.sync_api")
    import json as _json
    import re

    from playwright.sync_api import expect
    served = _json.loads(__import__("serve").models_index())["models"]
    context = browser.new_context()
    page = context.new_page()
    requests = []
    page.on("request", lambda r: requests.append((r.url, r.method, r.headers.get("range")))
            if "/models/" in r.url and not r.url.endswith("index.json") else None)
    page.route(f"{server_url}/fake/qwen3.gguf", lambda route: route.fulfill(
        status=200, body=(SMALL / "qwen3-q8_0.gguf").read_bytes(),
        headers={"Content-Type": "application/octet-stream"}))
    try:
        page.goto(server_url + "/?model=/fake/qwen3.gguf&backend=webgpu&max_binding=100000")
        status = page.get_by_role("status")
        expect(status).to_have_text(re.compile(r"^Ready|^Loading failed"), timeout=300_000)
        expect(status).to_have_text(re.compile(r"^Ready"), timeout=1)
        page.evaluate("document.getElementById('drawer').open = true")
        page.get_by_text("Will it run here?", exact=True).click()
        items = page.locator("#preflight li")
        expect(items).to_have_count(len(served), timeout=240_000)
        smol = page.locator('#preflight li[data-url$="SmolLM2-135M-Instruct.Q4_1.gguf"]')
        expect(smol).to_have_attribute("data-fits", "false")
        expect(smol.locator("summary")).to_have_text("SmolLM2 135M Instruct: does not fit here")
        text = smol.inner_text() if smol.locator("details").get_attribute("open") is not None else \
            smol.locator("details").evaluate("d => { d.open = true; return d.innerText; }")
        assert "parameters: 134.5 M" in text and "Q4_1 ×210" in text and "file: 98.4 MB" in text, text
        assert re.search(r"refused: .*256 tokens need [\d,]+ bytes .*binding limit of 100,000 bytes", text), text
        expect(page.locator('#model-select option[title="SmolLM2-135M-Instruct.Q4_1.gguf"]')).to_have_attribute(
            "data-preflight", "does not fit here")
        page.get_by_label("Model", exact=True).select_option(value="/models/SmolLM2-135M-Instruct.Q4_1.gguf")
        expect(page.locator("#load-error")).to_have_text(re.compile(
            r"^SmolLM2 135M Instruct cannot run here, so it was not downloaded: .*256 tokens need [\d,]+ bytes"))
        expect(status).to_have_text(re.compile(r"^Ready"))
        # header reads only: Range requests within the 8 MiB budget, never the whole file
        assert requests, "no header was read"
        for url, method, rng in requests:
            assert method in ("GET", "HEAD") and (method == "HEAD" or rng), (url, method, rng)
            if rng:
                start, end = map(int, re.fullmatch(r"bytes=(\d+)-(\d+)", rng).groups())
                assert end < 8 << 20, (url, rng)
    finally:
        context.close()


def test_storage_quota_decides_whether_the_file_can_be_cached():
    g, spec, costs = _small()
    size = (SMALL / "qwen3-q8_0.gguf").stat().st_size
    yes = pf.preflight(g, size, quota={"usage": 100, "quota": 100 + size})
    no = pf.preflight(g, size, quota={"usage": 101, "quota": 100 + size})
    assert yes["storage"] == {"free": size, "fits": True} and "cache" not in pf.summary(yes)
    assert no["storage"] == {"free": size - 1, "fits": False} and pf.summary(no).endswith("no room to cache it")
