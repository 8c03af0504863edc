"""The prefill product on subgroup matrices (matmul_sgmat.wgsl: tensor cores through Chromium's
chromium-experimental-subgroup-matrix, issue 26) and its selection.

Neither lavapipe nor SwiftShader has subgroup matrices, so here the kernel runs with its matrix built-ins swapped for
plain WGSL (kernels.matmul_sgmat(emulate=True): each lane of a "subgroup" computes its share of a result matrix from
the f16 copies read as u32 pairs); all the rest (half_rows, dequant_half, the kernel's loads, the store of each
subgroup's results, GLU, ACCUM, slabs and the edges) is what a GPU runs, checked against numpy in float64 within the
f16 rounding of the inputs (F16_TOL). Two configurations: 8 x 8 x 8 and 16 x 8 x 16 (M != N, so a swapped token / row
index fails). The real built-ins run on a GPU that has them: the H200
in Chromium (docs/bench/scripts/h200_page_gpu.sh's sgmat step: cera_web.tools.gemm_check in the page, f16
tolerance), with the results in BENCHMARKS.md."""
import dataclasses

import numpy as np
import pytest

from cera_web import kernels
from cera_web.gguf import GGMLType
from gpu_helpers import f32_buffer, read, run, step_buffer, upload
from test_gemm8 import product, random_blocks

pytestmark = pytest.mark.gpu

CONFIGS = [(8, 8, 8, 32), (16, 8, 16, 32)]


@pytest.fixture(scope="module")
def dev():
    from cera_web.gpu.native import NativeDevice
    return NativeDevice.create()


def sgmat_case(dev, fmt, config, T, N, K, *, norm=False, glu=False, gelu=False, accum=False, yoff=0, stride=None,
               seed=0, aligned=False):
    """Run choose_product's subgroup matrix dispatches for a device with ``config`` (half_rows, dequant_half and the
    emulated matmul_sgmat) and return (got, want): the GPU's Y and float64 numpy of the same product."""
    rng = np.random.default_rng(seed + int(fmt))
    raw, w = random_blocks(fmt, 2 * N if glu else N, K, rng)
    x = rng.standard_normal((T, K)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, K).astype(np.float32)
    eps = 1e-6
    stride = stride or N + yoff
    y0 = rng.standard_normal((T, stride)).astype(np.float32)
    adapter = kernels.Adapter(is_cpu=False, subgroup_size=config[3], wg_memory=32768, max_threads=1024,
                              subgroup_matrix=config)
    tuning = dataclasses.replace(kernels.Tuning.from_env(), sgmat="1")
    plan = kernels.choose_product(fmt, N, K, T, adapter, tuning, norm=norm, eps=eps, glu=glu, gelu=gelu,
                                  accum=accum, ystride=stride, yoff=yoff)
    assert [d.kernel for d in plan][::2] == ["half_rows"] + ["matmul_sgmat"] * ((len(plan) - 1) // 2)
    roles = {"w": upload(dev, raw), "x": f32_buffer(dev, x), "y": f32_buffer(dev, y0), "step": step_buffer(dev, T),
             "gain": f32_buffer(dev, g), "ones": f32_buffer(dev, np.ones(K, np.float32))}
    for d in plan:
        if d.scratch:
            roles[d.scratch_role] = dev.create_buffer(d.scratch)
        kw = dict(d.kwargs, emulate=True) if d.kernel == "matmul_sgmat" else d.kwargs
        groups = (d.groups[0], d.groups[1] + 1, 1) if d.kernel == "matmul_sgmat" else d.groups   # a token tile
        run(dev, getattr(kernels, d.kernel)(*d.args, **kw), [roles[r] for r in d.buffers], groups)  # past the end
    xf = x.astype(np.float64)
    if norm:
        xf = xf / np.sqrt((xf ** 2).mean(-1, keepdims=True) + eps) * g
    return read(dev, roles["y"], T * stride).reshape(T, stride), product(xf, w, y0, N, yoff, glu, gelu, accum)


# f16 inputs and weights (the kernel's own rounding, as on the GPU): |GPU - float64| / max |float64| within this
F16_TOL = 4e-3


def close(got, want):
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err <= F16_TOL, err
    return err


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c[:3])))
@pytest.mark.parametrize("fmt", [GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.Q8_0, GGMLType.Q4_1, GGMLType.Q4_0],
                         ids=lambda f: f.name)
def test_sgmat_formats_norm_accum(dev, fmt, config):
    """Each weight format through its w8 reader (dequant_half), normalised inputs (half_rows), ACCUM into a wider
    output at a column offset; T and N off the tile (T = 37, N = 45)."""
    close(*sgmat_case(dev, fmt, config, T=37, N=45, K=512, norm=True, accum=True, yoff=3, stride=50))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c[:3])))
@pytest.mark.parametrize("fmt,gelu,K", [(GGMLType.Q4_1, False, 352), (GGMLType.Q6_K, True, 512)],
                         ids=["q4_1_silu", "q6_k_gelu"])
def test_sgmat_glu_and_edges(dev, fmt, gelu, K, config):
    """SiLU and GELU gates over stacked gate / up rows without NORM; 70 tokens and 69 rows (tiles past both ends:
    the up rows start at the gate rows rounded up to the tile)."""
    close(*sgmat_case(dev, fmt, config, T=70, N=69, K=K, glu=True, gelu=gelu, seed=1))


def test_sgmat_plain_product_writes_only_its_columns(dev):
    """Without ACCUM the product overwrites columns yoff .. yoff + N of its tokens and nothing else (the row past N,
    the columns before yoff and the tokens past the pass keep y0)."""
    got, want = sgmat_case(dev, GGMLType.Q8_0, (16, 8, 16, 32), T=20, N=30, K=64, yoff=5, stride=40, seed=3)
    close(got, want)
    np.testing.assert_array_equal(got[:, :5], want[:, :5])
    np.testing.assert_array_equal(got[:, 35:], want[:, 35:])


def test_sgmat_slabs(dev, monkeypatch):
    """A weight whose f16 copy exceeds SGMAT_SLAB_BYTES goes in slabs of whole tiles, each its own dequant_half and
    product at its rows' offset (here slabs of 64 rows: 150 rows in three, GLU)."""
    monkeypatch.setattr(kernels, "SGMAT_SLAB_BYTES", 2 * 2 * 32 * 64 * 2)     # GLU, 32-row tiles of K = 64
    config = (8, 8, 8, 32)
    assert kernels.sgmat_slabs(150, 64, config, True) == [(0, 64), (64, 64), (128, 22)]
    close(*sgmat_case(dev, GGMLType.Q8_0, config, T=40, N=150, K=64, glu=True, seed=4))
    monkeypatch.setattr(kernels, "SGMAT_SLAB_BYTES", 2 * 32 * 64 * 2 - 1)     # less than a tile: one tile a slab
    assert kernels.sgmat_slabs(70, 64, config, True) == [(0, 32), (32, 32), (64, 6)]


NVIDIA = [{"componentType": "f16", "resultComponentType": "f16", "M": 16, "N": 16, "K": 16},
          {"componentType": "f16", "resultComponentType": "f32", "M": 16, "N": 8, "K": 16},
          {"componentType": "f16", "resultComponentType": "f32", "M": 16, "N": 16, "K": 16},
          {"componentType": "i8", "resultComponentType": "i32", "M": 16, "N": 16, "K": 32}]


def test_pick_subgroup_matrix():
    """The f16 -> f32 configuration with the largest M x N; none where subgroups vary in size or no f16 -> f32 one
    exists (integer and f16-result configurations are not used)."""
    assert kernels.pick_subgroup_matrix(NVIDIA, 32, 32) == (16, 16, 16, 32)
    assert kernels.pick_subgroup_matrix(NVIDIA[:2], 32, 32) == (16, 8, 16, 32)
    assert kernels.pick_subgroup_matrix([NVIDIA[0], NVIDIA[3]], 32, 32) is None
    assert kernels.pick_subgroup_matrix(NVIDIA, 16, 32) is None          # Intel-like: 16..32
    assert kernels.pick_subgroup_matrix(NVIDIA, None, None) is None
    apple = [{"componentType": "f16", "resultComponentType": "f32", "M": 8, "N": 8, "K": 8}]
    assert kernels.pick_subgroup_matrix(apple, 32, 32) == (8, 8, 8, 32)


H200 = kernels.Adapter(is_cpu=False, int8_dot=True, subgroup_size=32, wg_memory=49152, max_threads=1024,
                       subgroup_matrix=(16, 16, 16, 32))


ON = kernels.Tuning(sgmat="1")


def names(*args, adapter=H200, tuning=ON, **kw):
    return [d.kernel for d in kernels.choose_product(*args, adapter, tuning, **kw)]


def test_prefill_products_take_subgroup_matrices_where_the_adapter_has_them():
    """Prefill products (norm, GLU, ACCUM, every row range of a split weight) run half_rows, then per row range
    dequant_half and matmul_sgmat with the adapter's configuration and the tile's dispatch; one-token passes,
    last_only, the LM head, verify passes (each), K off the configuration, CERA_WEB_SGMAT=0 and adapters without a
    configuration keep their kernels."""
    G = GGMLType
    ds = kernels.choose_product(G.Q4_K, 8192, 2048, 512, H200, ON, norm=True, glu=True)
    assert [(d.kernel, d.groups, d.buffers, d.scratch) for d in ds] == [
        ("half_rows", (512, 1, 1), ("x", "xh", "step", "gain"), 2 * 512 * 2048),
        ("dequant_half", (32768, 1, 1), ("w", "wh"), 2 * 2 * 8192 * 2048),
        ("matmul_sgmat", (128, 4, 1), ("wh", "xh", "y", "step"), 0)]
    assert ds[2].kwargs["config"] == (16, 16, 16, 32) and ds[2].kwargs["glu"] and ds[0].kwargs["norm"]
    ds = kernels.choose_product(G.Q6_K, 3000, 8192, 100, H200, ON, accum=True,
                                parts=[(0, 2000), (2000, 1000)])
    assert [(d.kernel, d.part, d.groups, d.kwargs.get("yoff")) for d in ds] == [
        ("half_rows", None, (100, 1, 1), None),                    # 128 tokens of the tile: scratch 2 x 128 x K
        ("dequant_half", 0, (16000, 1, 1), None), ("matmul_sgmat", 0, (32, 1, 1), 0),
        ("dequant_half", 1, (8000, 1, 1), None), ("matmul_sgmat", 1, (16, 1, 1), 2000)]
    assert ds[0].scratch == 2 * 128 * 8192
    assert names(G.Q4_K, 2048, 2048, 1, norm=True) == ["matvec_q8"]
    assert names(G.Q4_K, 2048, 2048, 64, last_only=True) == ["matvec_q8"]
    assert names(G.Q8_0, 49152, 576, 64, logits=True, aligned=True) == ["matmul_tiled"]
    assert names(G.Q4_K, 2048, 2048, 16, each=True) == ["matvec_q8"]
    assert names(G.F16, 100, 40, 64) == ["matmul"]                               # K = 40: not a 16-step
    assert names(G.F16, 100, 48, 64) == ["half_rows", "dequant_half", "matmul_sgmat"]
    assert "matmul_i8" in names(G.Q4_K, 2048, 2048, 64, tuning=kernels.Tuning(sgmat="0"))
    assert "matmul_i8" in names(G.Q4_K, 2048, 2048, 64, tuning=kernels.Tuning())     # the default: off
    no_matrix = kernels.Adapter(is_cpu=False, int8_dot=True, subgroup_size=32, wg_memory=49152, max_threads=1024)
    assert "matmul_i8" in names(G.Q4_K, 2048, 2048, 64, adapter=no_matrix)


def test_subgroup_matrices_need_the_tiles_memory_and_threads():
    """The tile's workgroup memory and threads bound the choice exactly (a byte or a thread short: off)."""
    shape = kernels.sgmat_shape((16, 16, 16, 32), glu=True)
    assert shape == {"tokens": 128, "rows": 64, "threads": 128, "memory": 4 * 4 * 2 * 256, "bt": 4, "br": 2,
                     "gt": 2, "gr": 2}
    assert kernels.sgmat_shape((16, 16, 16, 32), glu=False)["memory"] == 4 * 4 * 256
    fits = kernels.Adapter(is_cpu=False, subgroup_size=32, wg_memory=shape["memory"], max_threads=128,
                           subgroup_matrix=(16, 16, 16, 32))
    assert kernels.sgmat_enabled(fits, 2048, glu=True, tuning=ON)
    assert not kernels.sgmat_enabled(kernels.Adapter(**{**vars(fits), "wg_memory": shape["memory"] - 1}), 2048,
                                     glu=True, tuning=ON)
    assert kernels.sgmat_enabled(kernels.Adapter(**{**vars(fits), "wg_memory": shape["memory"] - 1}), 2048,
                                 glu=False, tuning=ON)     # without GLU a subgroup's part holds one matrix
    assert not kernels.sgmat_enabled(kernels.Adapter(**{**vars(fits), "max_threads": 127}), 2048, glu=True,
                                     tuning=ON)
    assert not kernels.sgmat_enabled(fits, 2048, glu=True)          # the default: off
    with pytest.raises(ValueError, match="CERA_WEB_SGMAT"):
        kernels.Tuning.from_env({"CERA_WEB_SGMAT": "yes"})
    assert kernels.Tuning.from_env({"CERA_WEB_SGMAT": "0"}).sgmat == "0"
    assert kernels.Tuning.from_env({"CERA_WEB_SGMAT_BLOCK": "4,2"}).sgmat_block == (4, 2)
    for bad in ("3,2", "4", "a,b"):
        with pytest.raises(ValueError, match="CERA_WEB_SGMAT_BLOCK"):
            kernels.Tuning.from_env({"CERA_WEB_SGMAT_BLOCK": bad})


@pytest.mark.parametrize("block,grid", [((4, 4), (2, 2)), ((1, 2), (4, 2)), ((2, 2), (1, 4))],
                         ids=["4x4", "1x2-grid4x2", "grid1x4"])
def test_sgmat_other_blocks(dev, monkeypatch, block, grid):
    """Other subgroup blocks and grids (CERA_WEB_SGMAT_BLOCK / _GRID, benchmarks) give the same products: GLU and
    plain, edges."""
    monkeypatch.setenv("CERA_WEB_SGMAT_BLOCK", ",".join(map(str, block)))
    monkeypatch.setenv("CERA_WEB_SGMAT_GRID", ",".join(map(str, grid)))
    close(*sgmat_case(dev, GGMLType.Q4_K, (8, 8, 8, 32), T=70, N=69, K=256, glu=True, seed=5))
    close(*sgmat_case(dev, GGMLType.Q8_0, (16, 8, 16, 32), T=37, N=45, K=128, accum=True, yoff=2, stride=50))


def test_sgmat_kernel_text_uses_the_builtins():
    """The kernel built for a device (not emulated) enables the extension, f16 and subgroups, takes subgroup_id,
    loads its matrices from the f16 copies and multiply-accumulates on subgroup matrices: what Chromium compiles (the
    emulation above tests everything else)."""
    src = kernels.matmul_sgmat(512, 100, config=(16, 16, 16, 32), glu=True)
    head = src.split("\n")[1:5]
    assert head == ["enable f16;", "enable subgroups;", "enable chromium_experimental_subgroup_matrix;",
                    "diagnostic(off, chromium.subgroup_matrix_uniformity);"]
    assert "@builtin(subgroup_id)" in src and src.count("subgroupMatrixMultiplyAccumulate(") == 16   # 4 x 2, GLU
    assert "var<storage, read> WH: array<f16>;" in src and src.count("subgroupMatrixStore(") == 16
    assert "@builtin(subgroup_invocation_id) lane: u32" in src


def test_gemm_check_runs_the_devices_products(dev, monkeypatch):
    """cera_web.tools.gemm_check (what the page runs on a real GPU, web/bench.html?check=1) passes on this device's
    kernels and fails a product 0.1% off."""
    import asyncio

    from cera_web.tools import gemm_check
    out = asyncio.run(gemm_check.run(dev))
    assert out["ok"], out["cases"]
    assert len(out["cases"]) == len(gemm_check.CASES) and all(c["kernels"] for c in out["cases"])
    real = gemm_check.reference
    monkeypatch.setattr(gemm_check, "reference", lambda *a, **k: real(*a, **k) * 1.001)
    assert not asyncio.run(gemm_check.check(dev, GGMLType.Q8_0, 8, 16, 64))["ok"]


def test_a_model_prefills_on_the_emulated_kernel(monkeypatch, tmp_path):
    """The whole path through a model (Transformer.linear's f16 copies, split weights' row ranges, every tensor type
    of the mixed tiny llama) with CERA_WEB_SGMAT=emulate: the last prompt token's logits against the float32
    reference model within the f16 rounding of the products' inputs."""
    import asyncio
    from test_formats import MIXED, SPLIT_LIMIT, write_tiny_llama

    from cera_web.engine import Engine
    from cera_web.gpu.native import NativeDevice
    from cera_web.reference import ReferenceModel
    path = tmp_path / "mixed.gguf"
    V = write_tiny_llama(path, MIXED)
    monkeypatch.setenv("CERA_WEB_SGMAT", "emulate")
    made = []
    real = kernels.sgmat_product
    monkeypatch.setattr(kernels, "sgmat_product", lambda *a, **k: made.append(a[0]) or real(*a, **k))
    dev = NativeDevice.create(limits_override={"max-storage-buffer-binding-size": SPLIT_LIMIT})
    engine = asyncio.run(Engine.load(path, device=dev, context_size=40))
    try:
        ids = engine.tokenizer.encode("the cat sat on the mat; in the end, it is the cat that wins")
        engine.model.prefill(ids, 0, with_head=True)
        got = np.frombuffer(asyncio.run(engine.dev.read(engine.model.logits, 0, 4 * V)), np.float32)
        want = ReferenceModel.from_gguf(path).forward(ids, 0, last_only=True)[-1]
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err <= F16_TOL, err
        assert len(set(made)) >= 5           # products of several types took the subgroup matrix path
    finally:
        engine.close()
