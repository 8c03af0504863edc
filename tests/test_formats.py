"""Every GGUF weight format on the GPU (native wgpu; lavapipe on CI).

1. Kernels: the matmul and embedding kernels of each newer format (BF16, Q5_0, Q5_1, Q2_K..Q6_K) on RANDOM VALID
   blocks (random bytes with every f16 scale field set to a finite value, including negative, tiny, subnormal,
   zero and the largest f16) against numpy dequantization (cera_web.quants, itself checked against the `gguf`
   package's dequantization by tests/test_quants.py).
2. A tiny llama whose tensors mix every type (Q4_K, Q6_K, Q5_0, Q8_0, F16, F32 norms, and the rest in layer 1)
   against the float32 numpy reference model on the same file: logits and greedy tokens.
3. A tensor type without a GPU kernel (IQ2_XXS) fails at load, naming the tensor and the type.
"""
import asyncio
import struct

import numpy as np
import pytest

from cera_web import kernels, quants
from cera_web.gguf import GGML_BLOCK, GGMLType

pytestmark = pytest.mark.gpu

NEW = [GGMLType.BF16, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K,
       GGMLType.Q6_K]

# byte offsets of the f16 fields inside one block: (added to the weight or multiplying it, subtracted from it)
F16_FIELDS = {
    GGMLType.Q5_0: ([0], []), GGMLType.Q5_1: ([0, 2], []), GGMLType.Q8_0: ([0], []),
    GGMLType.Q2_K: ([80], [82]), GGMLType.Q3_K: ([108], []), GGMLType.Q4_K: ([0], [2]),
    GGMLType.Q5_K: ([0], [2]), GGMLType.Q6_K: ([208], []),
}
# largest f16, tiny normal, subnormal, zeros, ordinary values of both signs
SPECIAL_SCALES = np.array([65504.0, -65504.0, 6.1035156e-05, 5.9604645e-08, 0.0, -0.0, -1.0, 1.0, -0.0123, 3.5],
                          dtype=np.float16)


def random_weights(fmt, n, k, rng):
    """Random valid packed rows [n, k] of format fmt: (raw bytes as uint8 [n, row_bytes], dequantized float32)."""
    if fmt in (GGMLType.F32, GGMLType.F16, GGMLType.BF16):
        w = (rng.standard_normal((n, k)) * np.exp(rng.uniform(-20, 20, (n, 1)))).astype(np.float32)
        if fmt == GGMLType.BF16:
            raw = (w.view(np.uint32) >> 16).astype("<u2").view(np.uint8).reshape(n, -1)
        else:
            raw = w.astype("<f4" if fmt == GGMLType.F32 else "<f2").view(np.uint8).reshape(n, -1)
        return raw, quants.dequantize(raw, fmt, (n, k))
    be, bb = GGML_BLOCK[fmt]
    raw = rng.integers(0, 256, size=(n * k // be, bb), dtype=np.uint8)
    for at in sum(F16_FIELDS[fmt], []):
        vals = (rng.standard_normal(raw.shape[0]) * 0.05).astype(np.float16)
        special = rng.random(raw.shape[0]) < 0.3
        vals[special] = rng.choice(SPECIAL_SCALES, size=int(special.sum()))
        raw[:, at:at + 2] = vals.view(np.uint8).reshape(-1, 2)
    raw = raw.reshape(n, -1)
    return raw, quants.dequantize(raw, fmt, (n, k))


def magnitude(fmt, raw, wq):
    """|weights| with every term counted positively: where a weight is d*a - dmin*b (or d*a + m) with a, b >= 0,
    the dequantization of the same blocks with d >= 0 and dmin <= 0 (m >= 0). The GPU sums the terms in another
    order than numpy, so its rounding error is relative to these magnitudes, not to the (possibly cancelling) sum."""
    plus, minus = F16_FIELDS.get(fmt, ([], []))
    if not minus and fmt not in (GGMLType.Q5_1,):
        return np.abs(wq)
    blocks = raw.reshape(-1, GGML_BLOCK[fmt][1]).copy()
    for at in plus:
        blocks[:, at + 1] &= 0x7F          # clear the f16 sign bit
    for at in minus:
        blocks[:, at + 1] |= 0x80          # set it
    return np.abs(quants.dequantize(blocks, fmt, wq.shape))


@pytest.fixture(scope="module")
def dev():
    from cera_web.gpu.native import NativeDevice
    return NativeDevice.create()


def step_buffer(dev, n_tokens, pos0=0, out_index=0):
    buf = dev.create_buffer(16, kind="uniform")
    dev.write_buffer(buf, struct.pack("<4I", n_tokens, pos0, out_index, pos0 + n_tokens))
    return buf


def run(dev, wgsl, buffers, groups):
    pipe = dev.pipeline(wgsl)
    dev.submit([dev.record([(pipe, dev.bind(pipe, buffers), groups)])])


def read(dev, buf, n, dtype=np.float32):
    return np.frombuffer(asyncio.run(dev.read(buf, 0, n * np.dtype(dtype).itemsize)), dtype=dtype)


def upload(dev, array):
    buf = dev.create_buffer(array.nbytes)
    dev.write_buffer(buf, np.ascontiguousarray(array))
    return buf


def row_len(fmt, blocks):
    """A row length of `blocks` format blocks (k-quants: 256-weight super-blocks)."""
    return blocks * (GGML_BLOCK[fmt][0] if GGML_BLOCK[fmt][0] > 1 else 8)


# (blocks per row, rows, tokens, lanes, tokens per pass): rows not a multiple of the workgroup's 64 / lanes rows;
# lanes striding over more blocks than lanes and fewer; token counts below and above a pass
CASES = [(3, 7, 1, 32, 1), (3, 70, 3, 1, 8), (5, 9, 3, 32, 8), (6, 5, 11, 4, 8), (4, 67, 1, 1, 1)]


@pytest.mark.parametrize("fmt", NEW, ids=lambda f: f.name)
@pytest.mark.parametrize("blocks,N,T,lanes,tb", CASES)
def test_matmul(dev, fmt, blocks, N, T, lanes, tb):
    K = row_len(fmt, blocks)
    rng = np.random.default_rng(int(fmt) * 1000 + blocks * 100 + N + T)
    raw, wq = random_weights(fmt, N, K, rng)
    x = rng.standard_normal((T, K)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, K).astype(np.float32)      # the gain the kernel applies to x
    y0 = rng.standard_normal((T, N)).astype(np.float32)
    W, X, G = upload(dev, raw), upload(dev, x), upload(dev, g)
    xg = (x * g).astype(np.float64)
    want = xg @ wq.astype(np.float64).T
    # f32 accumulation over K terms: error well below 1e-5 of the sum of |terms|; one wrong weight moves the
    # result by about 1/K of it (K <= 1536 here), so this still catches any decoding mistake
    tol = 2e-5 * (np.abs(xg) @ magnitude(fmt, raw, wq).astype(np.float64).T) + 1e-30
    for accum in (False, True):
        Y = upload(dev, y0)
        run(dev, kernels.matmul(fmt, K, N, accum=accum, tokens=tb, lanes=lanes), [W, X, Y, step_buffer(dev, T), G],
            kernels.spread(kernels.matmul_groups(N, lanes)))
        got = read(dev, Y, T * N).reshape(T, N).astype(np.float64)
        err = np.abs(got - (want + (y0 if accum else 0)))
        bad = err > tol + (np.abs(y0) * 1e-6 if accum else 0)
        assert not bad.any(), (f"{bad.sum()} of {bad.size} outputs off, worst relative error "
                               f"{(err / tol).max() * 2e-5:.2e} at {np.unravel_index((err / tol).argmax(), err.shape)}")


@pytest.mark.parametrize("fmt", NEW, ids=lambda f: f.name)
def test_embed(dev, fmt):
    V, K = 50, row_len(fmt, 2)
    rng = np.random.default_rng(int(fmt))
    raw, table = random_weights(fmt, V, K, rng)
    ids = np.array([3, 0, 49, 7, 7, 1000, 21], np.uint32)     # 1000 is out of range: a zero row
    W, I = upload(dev, raw), upload(dev, ids)
    Y = dev.create_buffer(len(ids) * K * 4)
    run(dev, kernels.embed(fmt, K, V), [W, I, Y, step_buffer(dev, len(ids))], (-(-K // 512), len(ids), 1))
    want = table[np.minimum(ids, V - 1)]
    want[ids >= V] = 0
    mag = magnitude(fmt, raw, table)[np.minimum(ids, V - 1)]
    got = read(dev, Y, len(ids) * K).reshape(len(ids), K)
    # each weight is a product of two or three factors (and one subtraction): a few roundings of f32
    np.testing.assert_array_less(np.abs(got - want), 1e-6 * mag + 1e-37)
