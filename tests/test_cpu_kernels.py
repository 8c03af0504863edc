"""The CPU path's WebAssembly kernels (cera_web/cpu_kernels: qmatmul.c built to qmatmul.wasm by the set-up), run
here through wasmtime: the binary the page runs in the browser's WebAssembly.

- Each weight type against numpy: the kernel's product equals the product of the numpy-dequantized weights
  (cera_web.quants) with the activations quantized the kernel's way (16 bits, blocks of 32, emulated in numpy)
  within 1e-5 of sum |w| |x| per output (float summation order only), and the float32 product within 1e-3 of it
  (the activations' rounding, with a 300x outlier in one block).
- Boundary shapes: rows 1, 3, 5, 6 (no multiple of anything), T = 1..9 tokens (the kernel's groups of 4 and their
  remainders), cols one block and several; the output area is poisoned with NaN before each product, so a row, token
  or block the kernel skips (an off-by-one) fails; the weights' bytes are unchanged after the products.
- The default model: the same greedy tokens as the float32 reference model for fixed prompts, logits within 0.05.
- Without the built .wasm: a one-line notice and the float32 path, never a traceback.
"""
from __future__ import annotations

import asyncio
import json
import platform
import sys
from pathlib import Path

import numpy as np
import pytest

from cera_web import quants
from cera_web.cpu_kernels import WASM, load_kernels
from cera_web.gguf import GGML_BLOCK, GGMLType

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "smollm2_reference.json").read_text())
QUANT = [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q6_K]
F16_AT = {GGMLType.Q4_0: [0], GGMLType.Q4_1: [0, 2], GGMLType.Q5_0: [0], GGMLType.Q5_1: [0, 2], GGMLType.Q8_0: [0],
          GGMLType.Q4_K: [0, 2], GGMLType.Q6_K: [208]}


@pytest.fixture(scope="module")
def kernels():
    if not WASM.is_file():
        if sys.platform == "linux" and platform.machine() == "x86_64":
            pytest.fail(f"{WASM} is not built: tests/run.py builds it (python -m cera_web.tools.build_kernels)")
        pytest.skip("no pinned compiler for the CPU kernels on this platform")
    k = asyncio.run(load_kernels())
    assert k is not None
    return k


def random_blocks(rng, t: GGMLType, rows: int, cols: int) -> np.ndarray:
    """Random bytes of a [rows, cols] tensor of type t, its f16 scales made finite and small."""
    be, bb = GGML_BLOCK[t]
    raw = rng.integers(0, 256, size=(rows * cols // be, bb), dtype=np.uint8)
    for at in F16_AT[t]:
        raw[:, at:at + 2] = (rng.standard_normal(raw.shape[0]) * 0.01).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw.reshape(-1)


def q16(x: np.ndarray) -> np.ndarray:
    """x [T, cols] as the kernel sees it: blocks of 32 scaled by max|x| / 32767, rounded half to even."""
    xb = x.reshape(x.shape[0], -1, 32)
    d = (np.abs(xb).max(-1, keepdims=True) / np.float32(32767)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    return (np.round(xb * inv) * d).reshape(x.shape).astype(np.float32)


def product(k, w, x: np.ndarray) -> np.ndarray:
    """w.matmul(x) with the kernels' output area poisoned first (NaN): nothing computed stays from before."""
    xo, yo, so, size, _ = k._work_area(x.shape[0], w.rows, w.cols)
    k.rt.write(yo, np.full(size // 4, np.nan, np.float32))
    return w.matmul(x)


@pytest.mark.parametrize("t", QUANT, ids=lambda t: t.name)
def test_quantized_products_equal_numpy(kernels, t):
    rng = np.random.default_rng(int(t))
    block = GGML_BLOCK[t][0]
    for rows, blocks in ((1, 1), (3, 3), (5, 2), (6, 5)):
        cols = blocks * block
        raw = random_blocks(rng, t, rows, cols)
        W = quants.dequantize(raw, t, (rows, cols))
        w = kernels.place(raw, t, rows, cols)
        for T in range(1, 10):
            x = rng.standard_normal((T, cols)).astype(np.float32)
            x[:, 5] *= 300            # an outlier in one block, as real activations have
            y = product(kernels, w, x)
            assert y.shape == (T, rows) and np.isfinite(y).all(), (t.name, rows, cols, T)
            xq = q16(x)
            bound = np.abs(xq) @ np.abs(W).T
            assert np.all(np.abs(y - xq @ W.T) <= 1e-5 * bound + 1e-7), (t.name, rows, cols, T)
            assert np.all(np.abs(y - x @ W.T) <= 1e-3 * (np.abs(x) @ np.abs(W).T)), (t.name, rows, cols, T)
        got = np.empty(raw.size, np.uint8)
        kernels.rt.read_into(w.off, got)
        assert np.array_equal(got, raw), "the kernel wrote into its weights"


def test_float_weights_and_embedding_rows(kernels):
    rng = np.random.default_rng(1)
    for rows, cols in ((1, 1), (3, 37), (5, 64)):          # F32 takes any width: the 4-lane loop and its tail
        W = rng.standard_normal((rows, cols)).astype(np.float32)
        w = kernels.place(W.view(np.uint8), GGMLType.F32, rows, cols)
        for T in (1, 4, 7):
            x = rng.standard_normal((T, cols)).astype(np.float32)
            assert np.allclose(product(kernels, w, x), x @ W.T, rtol=1e-5, atol=1e-5)
    h = rng.standard_normal((4, 64)).astype(np.float16)      # F16 is widened to F32 as it is placed
    w = kernels.place(h.view(np.uint8), GGMLType.F16, 4, 64)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    assert np.allclose(product(kernels, w, x), x @ h.astype(np.float32).T, rtol=1e-5, atol=1e-5)
    raw = random_blocks(rng, GGMLType.Q8_0, 9, 64)
    w = kernels.place(raw, GGMLType.Q8_0, 9, 64)
    assert np.array_equal(w[[8, 0, 3]], quants.dequantize(raw, GGMLType.Q8_0, (9, 64))[[8, 0, 3]])


def test_default_model_greedy_tokens_equal_the_float32_reference(kernels, smollm2_gguf):
    from cera_web.reference import ReferenceModel
    ref = ReferenceModel.from_gguf(smollm2_gguf)
    fast = ReferenceModel.from_gguf(smollm2_gguf, kernels=kernels)
    assert kernels.weight_bytes < 100e6            # the GGUF blocks (98 MB file), not float32 (0.55 GB)
    for p in (FIXTURE["prompts"][0], FIXTURE["prompts"][4]):     # chat_capital's first token is a near-tie (0.08)
        a = ref.forward(p["prompt_ids"], 0, last_only=True)
        b = fast.forward(p["prompt_ids"], 0, last_only=True)
        assert np.abs(a - b).max() < 0.05, p["name"]
        assert fast.generate_greedy(p["prompt_ids"], 8) == p["greedy_ids"][:8], p["name"]


def test_a_missing_kernel_is_one_line_and_the_float_path(monkeypatch, tmp_path, capsys, smollm2_gguf):
    import cera_web.cpu_kernels as ck
    from cera_web.engine import Engine
    monkeypatch.setattr(ck, "WASM", tmp_path / "qmatmul.wasm")
    monkeypatch.setattr(ck, "_notified", False)
    assert asyncio.run(ck.load_kernels()) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not built" in err and "Traceback" not in err
    eng = asyncio.run(Engine.load(smollm2_gguf, device="cpu", context_size=64))
    try:
        assert eng.model.kernels is None
        p = FIXTURE["prompts"][4]
        assert asyncio.run(eng.generate(p["prompt_ids"], max_tokens=1, stop_at_eos=False)).tokens == p["greedy_ids"][:1]
    finally:
        eng.close()


@pytest.mark.browser
def test_the_page_cpu_path_runs_the_kernels(page, server_url):
    page.goto(server_url + "/web/bench.html?backend=cpu&prompt=8&decode=4")
    page.wait_for_function("document.getElementById('result').textContent.length > 0", timeout=300_000)
    text = page.text_content("#result")
    assert not text.startswith("ERROR"), text
    out = json.loads(text)
    assert out["cpu_kernels"] is True and out["backend"].startswith("CPU"), out
