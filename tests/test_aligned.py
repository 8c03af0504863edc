"""The aligned layout of Q4_1 / Q8_0 weights on the GPU (quants.aligned_layout; issue 13): shaders/repack.wgsl makes
it at upload exactly as the numpy specification does, and every kernel reading it (float32 matrix-vector, prefill
GEMM, embedding lookup, int8 matrix-vector) gives what it gives on the file's layout."""
import numpy as np
import pytest

from cera_web import kernels, quants
from cera_web.gguf import GGML_BLOCK, GGMLType
from gpu_helpers import f32_buffer, read, run, step_buffer, upload
from test_kernels import quantize, rmsnorm_ref

pytestmark = pytest.mark.gpu

TYPES = [GGMLType.Q4_1, GGMLType.Q8_0, GGMLType.Q6_K]


@pytest.fixture(scope="module")
def dev():
    from cera_web.gpu.native import NativeDevice
    return NativeDevice.create()


def weights(fmt, rows, K, rng):
    """Packed rows [rows, K] of fmt (quantized random data; random valid Q6_K super-blocks) and their dequantization.
    K: a multiple of 32 for Q4_1 / Q8_0; Q6_K takes the next multiple of 256 (see kdim)."""
    if fmt == GGMLType.Q6_K:         # random bytes, d small enough for weights of order 0.1-1 (int8 scales x q)
        blocks = rng.integers(0, 256, (rows * K // 256, 210), np.uint8)
        blocks[:, 208:210] = (rng.uniform(0.2, 1.0, len(blocks)) * 2e-4).astype("<f2").view(np.uint8).reshape(-1, 2)
        raw = blocks.reshape(rows, -1)
        return raw, quants.dequantize(raw, fmt, (rows, K)).astype(np.float64)
    return quantize(fmt, rng.standard_normal((rows, K)).astype(np.float32))


def kdim(fmt, K):
    """K rounded up to the type's block (256 for Q6_K's super-blocks)."""
    e = GGML_BLOCK[fmt][0]
    return -(-K // e) * e


def aligned(raw, fmt):
    """The aligned layout of file blocks raw, padded to 16 bytes as the engine's buffers are."""
    out = quants.aligned_layout(np.frombuffer(bytes(raw), np.uint8), fmt)
    return np.concatenate([out, np.zeros(-out.size % 16, np.uint8)])


def test_aligned_layout_spec():
    """Integers of every block in order, then the scales; the same bytes, nothing lost."""
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, (3, 34), np.uint8)
    out = quants.aligned_layout(raw, GGMLType.Q8_0)
    assert out.size == 104 and out[102:].tolist() == [0, 0]
    assert np.array_equal(out[:96].reshape(3, 32), raw[:, 2:]) and np.array_equal(out[96:102].reshape(3, 2), raw[:, :2])
    raw = rng.integers(0, 256, (2, 20), np.uint8)
    out = quants.aligned_layout(raw, GGMLType.Q4_1)
    assert np.array_equal(out[:32].reshape(2, 16), raw[:, 4:]) and np.array_equal(out[32:].reshape(2, 4), raw[:, :4])


@pytest.mark.parametrize("fmt", TYPES, ids=lambda f: f.name)
@pytest.mark.parametrize("segments", [[7], [4, 6], [2, 300, 1]], ids=["odd", "two", "three"])
def test_repack_on_upload(dev, fmt, segments, monkeypatch):
    """GPUModel._weight_buffer's repacking (slabs through a staging buffer, segments from several places of the file,
    an odd last Q8_0 block) gives quants.aligned_layout of the segments' bytes."""
    from cera_web.models import base
    monkeypatch.setattr(base, "REPACK_BYTES", 4 * GGML_BLOCK[fmt][1] + 3)     # slabs of 4 blocks: segments cross them
    block = GGML_BLOCK[fmt][1]
    rng = np.random.default_rng(len(segments))
    data = rng.integers(0, 256, (sum(segments) + 12 * len(segments)) * block, np.uint8).tobytes()

    class Source:
        def read(self, offset, n):
            return data[offset:offset + n]

    class Model(base.GPUModel):
        def __init__(self):
            self.dev, self.source, self._staging, self._slab = dev, Source(), None, None
            self._uploaded = self._to_upload = 0
            self.on_progress = None

    spans, at = [], 0
    for count in segments:
        spans.append((at, count * block))
        at += count * block + 12 * block          # gaps between the segments in the "file"
    if GGML_BLOCK[fmt][1] % 4 and any(c % 2 for c in segments[:-1]):
        pytest.skip("segments other than the last are whole words: an even count of 34- or 210-byte blocks")
    m = Model()
    buf = m._weight_buffer(fmt, spans, "w", True)
    want = aligned(b"".join(data[o:o + n] for o, n in spans), fmt)
    got = read(dev, buf, want.size, np.uint8)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("fmt", TYPES, ids=lambda f: f.name)
@pytest.mark.parametrize("T,lanes,norm_glu", [(1, 32, False), (1, 32, True), (3, 1, True), (2, 4, False)])
def test_matmul_aligned(dev, fmt, T, lanes, norm_glu):
    """matmul.wgsl on the aligned layout computes exactly what it computes on the file's layout (the same weights,
    the same order of operations)."""
    K, N, eps = kdim(fmt, 160), 37, 1e-5
    rng = np.random.default_rng(T + lanes)
    rows = 2 * N if norm_glu else N
    raw, wq = weights(fmt, rows, K, rng)
    x = (rng.standard_normal((T, K)) * 2).astype(np.float32)
    g = rng.standard_normal(K).astype(np.float32)
    X, G = f32_buffer(dev, x), f32_buffer(dev, g)
    out = []
    for layout in (False, True):
        W = upload(dev, aligned(raw, fmt) if layout else raw)
        Y = dev.create_buffer(4 * T * N)
        run(dev, kernels.matmul(fmt, K, N, norm=norm_glu, glu=norm_glu, eps=eps, lanes=lanes, aligned=layout),
            [W, X, Y, step_buffer(dev, T), G], kernels.spread(kernels.matmul_groups(N, lanes)))
        out.append(read(dev, Y, T * N).reshape(T, N))
    assert np.array_equal(out[0], out[1])
    xn = rmsnorm_ref(x, g, eps) if norm_glu else x
    a = xn @ wq[:N].T
    want = a / (1 + np.exp(-a)) * (xn @ wq[N:].T) if norm_glu else a
    np.testing.assert_allclose(out[1], want, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("fmt", TYPES, ids=lambda f: f.name)
@pytest.mark.parametrize("glu,tile", [(False, (64, 64, 1)), (True, (32, 32, 4)), (True, (64, 32, 2))])
def test_matmul_tiled_aligned(dev, fmt, glu, tile):
    K, N, T, eps, stride, yoff = kdim(fmt, 128), 45, 37, 1e-5, 100, 3
    rng = np.random.default_rng(int(glu) + tile[2])
    rows = 2 * N if glu else N
    raw, wq = weights(fmt, rows, K, rng)
    x = (rng.standard_normal((T, K)) * 2).astype(np.float32)
    g = rng.standard_normal(K).astype(np.float32)
    y0 = rng.standard_normal((T, stride)).astype(np.float32)
    W, X, G, Y = upload(dev, aligned(raw, fmt)), f32_buffer(dev, x), f32_buffer(dev, g), f32_buffer(dev, y0)
    run(dev, kernels.matmul_tiled(fmt, K, N, norm=True, eps=eps, accum=not glu, glu=glu, ystride=stride, yoff=yoff,
                                  tile=tile, aligned=True), [W, X, Y, step_buffer(dev, T), G],
        kernels.tiled_groups(N, T, tile))
    xn = rmsnorm_ref(x, g, eps)
    want = y0.copy()
    if glu:
        a = xn @ wq[:N].T
        want[:, yoff:yoff + N] = a / (1 + np.exp(-a)) * (xn @ wq[N:].T)
    else:
        want[:, yoff:yoff + N] += xn @ wq.T
    np.testing.assert_allclose(read(dev, Y, T * stride).reshape(T, stride), want, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("fmt", TYPES, ids=lambda f: f.name)
def test_embed_aligned(dev, fmt):
    V, K = 51, kdim(fmt, 96)
    raw, table = weights(fmt, V, K, np.random.default_rng(2))
    ids = np.array([3, 0, 50, 7, 7, 1000], np.uint32)
    Y = dev.create_buffer(len(ids) * K * 4)
    run(dev, kernels.embed(fmt, K, V, aligned=True), [upload(dev, aligned(raw, fmt)), upload(dev, ids), Y,
                                                       step_buffer(dev, len(ids))], (1, len(ids), 1))
    want = np.concatenate([table[ids[:-1]], np.zeros((1, K), np.float32)])
    np.testing.assert_allclose(read(dev, Y, len(ids) * K).reshape(len(ids), K), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fmt", TYPES, ids=lambda f: f.name)
@pytest.mark.parametrize("shape", [dict(lanes=1, wg=64, sg=False), dict(lanes=8, wg=64, sg=True),
                                   dict(lanes=4, wg=128, sg=False)], ids=["cpu", "sg8", "wg4x128"])
def test_matvec_q8_aligned(dev, fmt, shape):
    """The int8 matrix-vector kernel on the aligned layout against the exact emulation of test_matvec_q8 (its
    8-bit activations), plain and with the norm and GLU fused."""
    from test_matvec_q8 import random_rows, references
    if not dev.int8_dot:
        pytest.skip("this adapter's WGSL has no packed_4x8_integer_dot_product")
    if shape["sg"] and (dev.subgroup_size or 0) < shape["lanes"]:
        pytest.skip(f"subgroups of {dev.subgroup_size} < {shape['lanes']} lanes")
    K, N = kdim(fmt, 352), 37
    rng = np.random.default_rng(int(fmt) + shape["wg"])
    raw, wq = random_rows(fmt, 2 * N, K, rng)
    W = upload(dev, aligned(raw, fmt))
    x = (rng.standard_normal(K) * np.exp(rng.uniform(-2, 2, K))).astype(np.float32)
    g = rng.uniform(0.5, 1.5, K).astype(np.float32)
    for glu in (False, True):
        n = N if glu else 2 * N
        Y = dev.create_buffer(4 * n)
        run(dev, kernels.matvec_q8(fmt, K, n, norm=glu, eps=1e-5, glu=glu, aligned=True, **shape),
            [W, f32_buffer(dev, x), Y, step_buffer(dev, 1), f32_buffer(dev, g)],
            kernels.spread(kernels.matvec_q8_groups(n, shape["lanes"], shape["wg"])))
        got = read(dev, Y, n)
        emulated, _, tol, _ = references(wq, x, g if glu else None)
        if glu:
            a, b = emulated[:N], emulated[N:]
            act = a / (1 + np.exp(-a))
            bound = 1.2 * np.abs(b) * tol[:N] + np.abs(act) * tol[N:] + 1e-6
            np.testing.assert_array_less(np.abs(got - act * b), bound)
        else:
            assert np.all(np.abs(got - emulated) <= tol), np.max(np.abs(got - emulated) / tol)


@pytest.mark.parametrize("fmt", TYPES, ids=lambda f: f.name)
@pytest.mark.parametrize("T,N,K,glu,gelu,accum", [(70, 45, 160, False, False, True), (13, 130, 96, True, False, False),
                                                  (64, 64, 256, True, True, False), (5, 7, 32, False, False, False)])
def test_matmul_i8(dev, fmt, T, N, K, glu, gelu, accum):
    """The prefill GEMM on 8-bit activations for aligned weights (matmul_i8.wgsl, the default on GPUs with
    dot4I8Packed) against numpy fed the very blocks quantize_rows wrote (only the summation order differs), and
    against the float32 product (the accuracy cost of 8-bit activations, within test_gemm8's F32_TOL); rows, tokens
    and K past the tiles, a token tile past the pass's end, GLU (SiLU, GELU), ACCUM into a wider output."""
    from test_gemm8 import F32_TOL, product, quantize_gpu, random_blocks, read_blocks
    if not dev.int8_dot:
        pytest.skip("this adapter's WGSL has no packed_4x8_integer_dot_product")
    K = kdim(fmt, K)
    rng = np.random.default_rng(T + N + K)
    raw, w = random_blocks(fmt, 2 * N if glu else N, K, rng)
    x = rng.standard_normal((T, K)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, K).astype(np.float32)
    yoff, stride, eps = 3, N + 7, 1e-6
    y0 = rng.standard_normal((T, stride)).astype(np.float32)
    Q, W = quantize_gpu(dev, x, g, eps), upload(dev, aligned(raw, fmt))
    got = []
    tiles = [(64, False), (32, False)] + ([] if glu else [(32, True)])   # kernels.matmul_i8_tile's choices
    for tr, pair in tiles:
        Y = f32_buffer(dev, y0)
        gx, gy, _ = kernels.matmul_i8_groups(N, T, tr, pair=pair)
        run(dev, kernels.matmul_i8(fmt, K, N, accum=accum, glu=glu, gelu=gelu, ystride=stride, yoff=yoff,
                                   aligned=True, rows=tr, pair=pair), [W, Q, Y, step_buffer(dev, T)], (gx, gy + 1, 1))
        got.append(read(dev, Y, T * stride).reshape(T, stride))
    assert all(np.array_equal(got[0], g) for g in got[1:])       # the same sums in the same order
    got = got[0]
    d, _, q = read_blocks(dev, Q, T, K)
    xf = x.astype(np.float64)
    xf = xf / np.sqrt((xf ** 2).mean(-1, keepdims=True) + eps) * g

    exact = product((d[..., None] * q).reshape(T, K), w, y0, N, yoff, glu, gelu, accum)
    f32 = product(xf, w, y0, N, yoff, glu, gelu, accum)
    scale = np.abs(f32).max()
    assert np.abs(got - exact).max() <= 2e-5 * scale, np.abs(got - exact).max() / scale
    assert np.abs(got - f32).max() <= F32_TOL * scale, np.abs(got - f32).max() / scale


def test_which_weights_are_aligned(monkeypatch):
    """Q4_1, Q8_0 and Q6_K matrices (Q4_K and others keep the file's layout); none with CERA_WEB_ALIGNED=0."""
    from types import SimpleNamespace
    from cera_web.models.base import GPUModel
    types = {"blk.0.ffn_down.weight": GGMLType.Q6_K, "token_embd.weight": GGMLType.Q6_K,
             "blk.0.attn_q.weight": GGMLType.Q4_1, "blk.0.ffn_up.weight": GGMLType.Q8_0,
             "blk.0.ffn_gate.weight": GGMLType.Q4_K, "output.weight": GGMLType.Q6_K}
    m = SimpleNamespace(gguf=SimpleNamespace(tensor=lambda n: SimpleNamespace(type=types[n])),
                        spec=SimpleNamespace(lm_head="token_embd.weight"), tuning=kernels.Tuning.from_env())
    got = {n for n in types if GPUModel.aligned(m, n)}
    assert got == {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight",
                   "output.weight"}
    monkeypatch.setenv("CERA_WEB_ALIGNED", "0")       # read when a model is made (GPUModel.tuning)
    m.tuning = kernels.Tuning.from_env()
    assert not any(GPUModel.aligned(m, n) for n in types)
