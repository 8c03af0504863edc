"""The prefill product on subgroup matrices (matmul_sgmat.wgsl: tensor cores through Chromium's
chromium-experimental-subgroup-matrix, issue 26) and its selection.

Neither lavapipe nor SwiftShader has subgroup matrices, so here the kernel runs with its matrix built-ins swapped for
plain WGSL (kernels.matmul_sgmat(emulate=True): each invocation holds whole matrices, f32 in place of f16); all the
rest of its text (the tile's loads, dequantization, the norm, the store of each subgroup's results, GLU, ACCUM and
the edges) is the kernel's, checked against numpy in float64 to float32 rounding. Two configurations: 8 x 8 x 8 and
16 x 8 x 16 (M != N, so a swapped token / row index fails). The real built-ins run on a GPU that has them: the H200
in Chromium (docs/bench/scripts/h200_page_gpu.sh's sgmat step: cera_web.tools.gemm_check in the page, f16
tolerance), with the results in BENCHMARKS.md."""
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
               seed=0):
    """Run the emulated matmul_sgmat and return (got, want): the GPU's Y and float64 numpy of the same product."""
    rng = np.random.default_rng(seed + int(fmt))
    raw, w = random_blocks(fmt, 2 * N if glu else N, K, rng)
    x = rng.standard_normal((T, K)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, K).astype(np.float32)
    eps = 1e-6
    stride = stride or N + yoff
    y0 = rng.standard_normal((T, stride)).astype(np.float32)
    Y = f32_buffer(dev, y0)
    gx, gy, _ = kernels.sgmat_groups(N, T, config, glu)
    run(dev, kernels.matmul_sgmat(fmt, K, N, config=config, norm=norm, eps=eps, accum=accum, glu=glu, gelu=gelu,
                                  ystride=stride, yoff=yoff, emulate=True),
        [upload(dev, raw), f32_buffer(dev, x), Y, step_buffer(dev, T), f32_buffer(dev, g)],
        (gx, gy + 1, 1))                                  # a token tile past the pass's end
    xf = x.astype(np.float64)
    if norm:
        xf = xf / np.sqrt((xf ** 2).mean(-1, keepdims=True) + eps) * g
    return read(dev, Y, T * stride).reshape(T, stride), product(xf, w, y0, N, yoff, glu, gelu, accum)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c[:3])))
@pytest.mark.parametrize("fmt", [GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.Q8_0, GGMLType.Q4_1, GGMLType.Q4_0],
                         ids=lambda f: f.name)
def test_sgmat_formats_norm_accum(dev, fmt, config):
    """Each weight format through its w8 reader, normalised inputs, ACCUM into a wider output at a column offset;
    T and N off the tile (T = 37, N = 45)."""
    got, want = sgmat_case(dev, fmt, config, T=37, N=45, K=512, norm=True, accum=True, yoff=3, stride=50)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c[:3])))
@pytest.mark.parametrize("fmt,gelu,K", [(GGMLType.Q4_1, False, 352), (GGMLType.Q6_K, True, 512)],
                         ids=["q4_1_silu", "q6_k_gelu"])
def test_sgmat_glu_and_edges(dev, fmt, gelu, K, config):
    """SiLU and GELU gates over stacked gate / up rows without NORM; 70 tokens and 69 rows (tiles past both ends),
    K = 352: eleven 32-steps."""
    got, want = sgmat_case(dev, fmt, config, T=70, N=69, K=K, glu=True, gelu=gelu, seed=1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_sgmat_plain_product_writes_only_its_columns(dev):
    """Without ACCUM the product overwrites columns yoff .. yoff + N of its tokens and nothing else (the row past N,
    the columns before yoff and the tokens past the pass keep y0)."""
    got, want = sgmat_case(dev, GGMLType.Q8_0, (16, 8, 16, 32), T=20, N=30, K=64, yoff=5, stride=40, seed=3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


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


def names(*args, adapter=H200, tuning=kernels.Tuning(), **kw):
    return [d.kernel for d in kernels.choose_product(*args, adapter, tuning, **kw)]


def test_prefill_products_take_subgroup_matrices_where_the_adapter_has_them():
    """Prefill products (norm, GLU, ACCUM, every row range of a split weight) run matmul_sgmat with the adapter's
    configuration and the tile's dispatch; one-token passes, last_only, the LM head, verify passes (each), K off a
    32-step, CERA_WEB_SGMAT=0 and adapters without a configuration keep their kernels."""
    G = GGMLType
    ds = kernels.choose_product(G.Q4_K, 8192, 2048, 512, H200, kernels.Tuning(), norm=True, glu=True)
    assert [(d.kernel, d.groups, d.kwargs["config"], d.kwargs["glu"], d.kwargs["norm"]) for d in ds] == \
        [("matmul_sgmat", (128, 8, 1), (16, 16, 16, 32), True, True)]
    ds = kernels.choose_product(G.Q6_K, 3000, 8192, 100, H200, kernels.Tuning(), accum=True,
                                parts=[(0, 2000), (2000, 1000)])
    assert [(d.kernel, d.part, d.groups, d.kwargs["yoff"]) for d in ds] == \
        [("matmul_sgmat", 0, (32, 2, 1), 0), ("matmul_sgmat", 1, (16, 2, 1), 2000)]
    assert names(G.Q4_K, 2048, 2048, 1, norm=True) == ["matvec_q8"]
    assert names(G.Q4_K, 2048, 2048, 64, last_only=True) == ["matvec_q8"]
    assert names(G.Q8_0, 49152, 576, 64, logits=True, aligned=True) == ["matmul_tiled"]
    assert names(G.Q4_K, 2048, 2048, 16, each=True) == ["matvec_q8"]
    assert names(G.F16, 100, 48, 64) == ["matmul"]                               # K = 48: not a 32-step
    assert names(G.F16, 100, 64, 64) == ["matmul_sgmat"]
    assert "matmul_i8" in names(G.Q4_K, 2048, 2048, 64, tuning=kernels.Tuning(sgmat="0"))
    no_matrix = kernels.Adapter(is_cpu=False, int8_dot=True, subgroup_size=32, wg_memory=49152, max_threads=1024)
    assert "matmul_i8" in names(G.Q4_K, 2048, 2048, 64, adapter=no_matrix)


def test_subgroup_matrices_need_the_tiles_memory_and_threads():
    """The tile's workgroup memory and threads bound the choice exactly (a byte or a thread short: off)."""
    shape = kernels.sgmat_shape((16, 16, 16, 32), glu=True)
    assert shape == {"tokens": 64, "rows": 64, "threads": 128, "memory": 32512, "w_per": 4, "x_per": 4,
                     "o_per": 32}
    fits = kernels.Adapter(is_cpu=False, subgroup_size=32, wg_memory=shape["memory"], max_threads=128,
                           subgroup_matrix=(16, 16, 16, 32))
    assert kernels.sgmat_enabled(fits, 2048, glu=True)
    assert not kernels.sgmat_enabled(kernels.Adapter(**{**vars(fits), "wg_memory": shape["memory"] - 1}), 2048,
                                     glu=True)
    assert kernels.sgmat_enabled(kernels.Adapter(**{**vars(fits), "wg_memory": shape["memory"] - 1}), 2048,
                                 glu=False)        # without GLU the tile needs less
    assert not kernels.sgmat_enabled(kernels.Adapter(**{**vars(fits), "max_threads": 127}), 2048, glu=True)
    with pytest.raises(ValueError, match="CERA_WEB_SGMAT"):
        kernels.Tuning.from_env({"CERA_WEB_SGMAT": "1"})
    assert kernels.Tuning.from_env({"CERA_WEB_SGMAT": "0"}).sgmat == "0"


def test_sgmat_kernel_text_uses_the_builtins():
    """The kernel built for a device (not emulated) enables the extension, f16 and subgroups, takes subgroup_id and
    multiply-accumulates on subgroup matrices: what Chromium compiles (the emulation above tests everything else)."""
    src = kernels.matmul_sgmat(GGMLType.Q4_K, 512, 100, config=(16, 16, 16, 32), glu=True, norm=True)
    head = src.split("\n")[1:5]
    assert head == ["enable f16;", "enable subgroups;", "enable chromium_experimental_subgroup_matrix;",
                    "diagnostic(off, chromium.subgroup_matrix_uniformity);"]
    assert "@builtin(subgroup_id)" in src and src.count("subgroupMatrixMultiplyAccumulate(") == 8
    assert "alias H = f16;" in src


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
