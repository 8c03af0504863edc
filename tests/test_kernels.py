"""Each WGSL kernel against numpy, on the native backend (wgpu; lavapipe on CI).

Sizes include rows and token counts that are not multiples of the workgroup tiles."""
import math

import numpy as np
import pytest

from cera_web import kernels, quants
from cera_web.gguf import GGMLType
from gpu_helpers import f32_buffer, read, run, step_buffer, upload

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def dev():
    from cera_web.gpu.native import NativeDevice
    return NativeDevice.create()


def quantize(fmt, w):
    """Packed bytes of w [N, K] in format fmt, and what they dequantize to."""
    if fmt == GGMLType.F32:
        raw = w.astype(np.float32).tobytes()
    elif fmt == GGMLType.F16:
        raw = w.astype(np.float16).tobytes()
    else:
        raw = {GGMLType.Q8_0: quants.quantize_q8_0, GGMLType.Q4_0: quants.quantize_q4_0,
               GGMLType.Q4_1: quants.quantize_q4_1}[fmt](w).tobytes()
    return raw, quants.dequantize(raw, fmt, w.shape)


FMTS = [GGMLType.F32, GGMLType.F16, GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q8_0]


def rmsnorm_ref(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.name)
@pytest.mark.parametrize("K,N,T,lanes", [(64, 7, 1, 32), (576, 37, 3, 1), (160, 5, 11, 4), (96, 70, 2, 32)])
def test_matmul(dev, fmt, K, N, T, lanes):
    rng = np.random.default_rng(K + N + T)
    w = rng.standard_normal((N, K)).astype(np.float32)
    raw, wq = quantize(fmt, w)
    x = rng.standard_normal((T, K)).astype(np.float32)
    y0 = rng.standard_normal((T, N)).astype(np.float32)
    W = upload(dev, raw)
    X, ones = f32_buffer(dev, x), f32_buffer(dev, np.ones(K))
    for accum in (False, True):
        Y = f32_buffer(dev, y0)
        run(dev, kernels.matmul(fmt, K, N, accum=accum, lanes=lanes), [W, X, Y, step_buffer(dev, T), ones],
            kernels.spread(kernels.matmul_groups(N, lanes)))
        want = x @ wq.T + (y0 if accum else 0)
        np.testing.assert_allclose(read(dev, Y, T * N).reshape(T, N), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt", [GGMLType.F32, GGMLType.Q4_1, GGMLType.Q8_0], ids=lambda f: f.name)
@pytest.mark.parametrize("T,lanes,tokens", [(1, 32, 1), (3, 1, 8), (10, 4, 8)])
def test_matmul_norm_glu(dev, fmt, T, lanes, tokens):
    """The fused forms: RMSNorm of the input with a gain, SwiGLU over stacked gate/up rows, output columns."""
    K, N, eps = 128, 37, 1e-5
    rng = np.random.default_rng(T + lanes)
    w = rng.standard_normal((2 * N, K)).astype(np.float32)
    raw, wq = quantize(fmt, w)
    x = (rng.standard_normal((T, K)) * 3).astype(np.float32)
    g = rng.standard_normal(K).astype(np.float32)
    W = upload(dev, raw)
    X, G = f32_buffer(dev, x), f32_buffer(dev, g)
    xn = rmsnorm_ref(x, g, eps)
    # GLU with the norm fused
    Y = dev.create_buffer(T * N * 4)
    run(dev, kernels.matmul(fmt, K, N, norm=True, eps=eps, glu=True, tokens=tokens, lanes=lanes),
        [W, X, Y, step_buffer(dev, T), G], kernels.spread(kernels.matmul_groups(N, lanes)))
    a, b = xn @ wq[:N].T, xn @ wq[N:].T
    np.testing.assert_allclose(read(dev, Y, T * N).reshape(T, N), a / (1 + np.exp(-a)) * b, rtol=2e-4, atol=2e-4)
    # plain projection of all 2N rows into columns 5.. of a wider output, other columns untouched
    stride = 2 * N + 9
    y0 = rng.standard_normal((T, stride)).astype(np.float32)
    Y = f32_buffer(dev, y0)
    run(dev, kernels.matmul(fmt, K, 2 * N, norm=True, eps=eps, ystride=stride, yoff=5, tokens=tokens, lanes=lanes),
        [W, X, Y, step_buffer(dev, T), G], kernels.spread(kernels.matmul_groups(2 * N, lanes)))
    want = y0.copy()
    want[:, 5:5 + 2 * N] = xn @ wq.T
    np.testing.assert_allclose(read(dev, Y, T * stride).reshape(T, stride), want, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("fmt", [GGMLType.F32, GGMLType.Q4_1, GGMLType.Q8_0], ids=lambda f: f.name)
@pytest.mark.parametrize("lanes,rpt,wg,sg", [(8, 4, 64, True), (8, 2, 128, False), (4, 4, 256, True)])
def test_matmul_decode_glu_shapes(dev, fmt, lanes, rpt, wg, sg):
    """The decode shapes (rows per thread, workgroup size, subgroup shuffles) with the norm and SwiGLU fused."""
    if sg and (dev.subgroup_size or 0) < lanes:
        pytest.skip(f"subgroups of {dev.subgroup_size} < {lanes} lanes on this adapter")
    K, N, eps = 256, 45, 1e-5
    rng = np.random.default_rng(lanes + rpt + wg)
    w = rng.standard_normal((2 * N, K)).astype(np.float32)
    raw, wq = quantize(fmt, w)
    x = (rng.standard_normal((1, K)) * 3).astype(np.float32)
    g = rng.standard_normal(K).astype(np.float32)
    W, X, G = upload(dev, raw), f32_buffer(dev, x), f32_buffer(dev, g)
    Y = dev.create_buffer(N * 4)
    run(dev, kernels.matmul(fmt, K, N, norm=True, eps=eps, glu=True, tokens=1, lanes=lanes, rpt=rpt, wg=wg, sg=sg),
        [W, X, Y, step_buffer(dev, 1), G], kernels.spread(kernels.matmul_groups(N, lanes, rpt, wg)))
    xn = rmsnorm_ref(x, g, eps)
    a, b = xn @ wq[:N].T, xn @ wq[N:].T
    np.testing.assert_allclose(read(dev, Y, N).reshape(1, N), a / (1 + np.exp(-a)) * b, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("tile", kernels.TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.name)
@pytest.mark.parametrize("T,norm,glu", [(40, True, True), (7, False, False), (70, True, False)])
def test_matmul_tiled(dev, fmt, T, norm, glu, tile):
    """The prefill GEMM equals the matrix-vector kernel's result for every tile shape, edges included (rows and tokens
    past the last tile, a token tile past the pass's end)."""
    K, N, eps, stride, yoff = 96, 45 if T < 70 else 77, 1e-5, 90, 3
    rng = np.random.default_rng(T)
    rows = 2 * N if glu else N
    w = rng.standard_normal((rows, K)).astype(np.float32)
    raw, wq = quantize(fmt, w)
    x = (rng.standard_normal((T, K)) * 2).astype(np.float32)
    g = rng.standard_normal(K).astype(np.float32) if norm else np.ones(K, np.float32)
    y0 = rng.standard_normal((T, stride)).astype(np.float32)
    W = upload(dev, raw)
    X, G, Y = f32_buffer(dev, x), f32_buffer(dev, g), f32_buffer(dev, y0)
    gx, gy, _ = kernels.tiled_groups(N, T, tile)
    run(dev, kernels.matmul_tiled(fmt, K, N, norm=norm, eps=eps, accum=not glu, glu=glu, ystride=stride, yoff=yoff,
                                  tile=tile), [W, X, Y, step_buffer(dev, T), G], (gx, gy + 1, 1))
    xn = rmsnorm_ref(x, g, eps) if norm else x
    want = y0.copy()
    if glu:
        a, b = xn @ wq[:N].T, xn @ wq[N:].T
        want[:, yoff:yoff + N] = a / (1 + np.exp(-a)) * b
    else:
        want[:, yoff:yoff + N] += xn @ wq.T
    np.testing.assert_allclose(read(dev, Y, T * stride).reshape(T, stride), want, rtol=2e-4, atol=2e-4)


def test_matmul_last_only(dev):
    K, N, T, eps = 64, 9, 5, 1e-6
    rng = np.random.default_rng(1)
    w = rng.standard_normal((N, K)).astype(np.float32)
    x = rng.standard_normal((T, K)).astype(np.float32)
    g = rng.standard_normal(K).astype(np.float32)
    W, X, G = f32_buffer(dev, w), f32_buffer(dev, x), f32_buffer(dev, g)
    Y = dev.create_buffer(N * 4)
    run(dev, kernels.matmul(GGMLType.F32, K, N, norm=True, eps=eps, last_only=True),
        [W, X, Y, step_buffer(dev, T), G], (5, 1, 1))
    np.testing.assert_allclose(read(dev, Y, N), w @ rmsnorm_ref(x[-1], g, eps), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", [GGMLType.F32, GGMLType.Q8_0, GGMLType.Q4_1], ids=lambda f: f.name)
def test_embed(dev, fmt):
    V, K = 50, 96
    rng = np.random.default_rng(2)
    raw, table = quantize(fmt, rng.standard_normal((V, K)).astype(np.float32))
    ids = np.array([3, 0, 49, 7, 7, 1000], np.uint32)     # 1000 is out of range: zero row
    W = upload(dev, raw)
    I = upload(dev, ids)
    Y = dev.create_buffer(len(ids) * K * 4)
    run(dev, kernels.embed(fmt, K, V), [W, I, Y, step_buffer(dev, len(ids))], (1, len(ids), 1))
    want = np.concatenate([table[ids[:-1]], np.zeros((1, K), np.float32)])
    np.testing.assert_allclose(read(dev, Y, len(ids) * K).reshape(len(ids), K), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rpt", [1, 3])
def test_rmsnorm(dev, rpt):
    K, T, eps = 100, 4, 1e-5
    rng = np.random.default_rng(3)
    x = rng.standard_normal((T * rpt, K)).astype(np.float32)
    g = rng.standard_normal(K).astype(np.float32)
    X = upload(dev, x)
    G = upload(dev, g)
    Y = dev.create_buffer(x.nbytes + 2 * K * 4)
    run(dev, kernels.rmsnorm(K, eps, rpt), [X, G, Y, step_buffer(dev, T)], (T * rpt + 2, 1, 1))
    want = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g
    got = read(dev, Y, x.size).reshape(x.shape)
    np.testing.assert_allclose(got[:T * rpt], want, rtol=1e-5, atol=1e-5)


def rope_ref(x, pos0, freq, neox):
    x = x.copy()
    T, H, D = x.shape
    ang = (pos0 + np.arange(T))[:, None] * freq[None, :]          # [T, D/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if neox:
        a, b = x[..., :D // 2].copy(), x[..., D // 2:].copy()
        x[..., :D // 2], x[..., D // 2:] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., 0::2].copy(), x[..., 1::2].copy()
        x[..., 0::2], x[..., 1::2] = a * c - b * s, a * s + b * c
    return x


@pytest.mark.parametrize("neox", [False, True])
def test_rope(dev, neox):
    T, H, D, pos0 = 3, 5, 64, 17
    rng = np.random.default_rng(4)
    x = rng.standard_normal((T, H, D)).astype(np.float32)
    freq = (10000.0 ** (-np.arange(0, D, 2) / D)).astype(np.float32)
    X = upload(dev, x)
    F = upload(dev, freq)
    run(dev, kernels.rope(H, D, neox, False), [X, F, step_buffer(dev, T, pos0)], (math.ceil(H * D / 2 / 64), T, 1))
    np.testing.assert_allclose(read(dev, X, x.size).reshape(x.shape), rope_ref(x, pos0, freq, neox), atol=2e-4)


@pytest.mark.parametrize("neox,qk_norm", [(False, False), (True, True)])
def test_rope_store(dev, neox, qk_norm):
    QH, KVH, D, T, pos0, ctx, eps = 4, 2, 32, 3, 5, 12, 1e-6
    rng = np.random.default_rng(8)
    qkv = rng.standard_normal((T, QH + 2 * KVH, D)).astype(np.float32)
    bias = rng.standard_normal((QH + 2 * KVH, D)).astype(np.float32)
    ng = rng.standard_normal((2, D)).astype(np.float32)
    freq = (10000.0 ** (-np.arange(0, D, 2) / D)).astype(np.float32)
    Q = dev.create_buffer(T * QH * D * 4)
    Kc, Vc = f32_buffer(dev, np.zeros((ctx, KVH, D))), f32_buffer(dev, np.zeros((ctx, KVH, D)))
    bufs = [f32_buffer(dev, a) for a in (qkv, bias, ng, freq)] + [Q, Kc, Vc, step_buffer(dev, T, pos0)]
    run(dev, kernels.rope_store(QH, KVH, D, neox, qk_norm, eps), bufs, (QH + 2 * KVH, T, 1))
    h = qkv + bias
    q, k, v = h[:, :QH], h[:, QH:QH + KVH], h[:, QH + KVH:]
    if qk_norm:
        q, k = rmsnorm_ref(q, ng[0], eps), rmsnorm_ref(k, ng[1], eps)
    np.testing.assert_allclose(read(dev, Q, T * QH * D).reshape(T, QH, D), rope_ref(q, pos0, freq, neox), atol=2e-4)
    kc = read(dev, Kc, ctx * KVH * D).reshape(ctx, KVH, D)
    vc = read(dev, Vc, ctx * KVH * D).reshape(ctx, KVH, D)
    np.testing.assert_allclose(kc[pos0:pos0 + T], rope_ref(k, pos0, freq, neox), atol=2e-4)
    np.testing.assert_allclose(vc[pos0:pos0 + T], v, atol=1e-6)
    assert not kc[:pos0].any() and not kc[pos0 + T:].any() and not vc[pos0 + T:].any()


# query heads a key/value head (G) 3, 2, 2, 3, 2, 7 (blocks of 4 and 3: the last block's missing head), 6 (3 + 3),
# 8 (4 + 4), 5 (3 + 2) and 1; heads of 64, 32, 128, 36 (a row of 9 vec4s), 256; keys past one pass of the loop (1500)
@pytest.mark.parametrize("QH,KVH,D,pos,neox,qk_norm", [(9, 3, 64, 0, False, False), (4, 2, 32, 300, True, True),
                                                        (2, 1, 128, 5, False, False), (3, 1, 64, 1500, False, False),
                                                        (4, 2, 36, 40, True, False), (14, 2, 64, 70, True, True),
                                                        (12, 2, 128, 1030, False, False), (8, 1, 32, 600, True, True),
                                                        (10, 2, 64, 9, False, True), (3, 3, 256, 300, True, False)])
def test_attention_decode_equals_rope_store_then_attention(dev, QH, KVH, D, pos, neox, qk_norm):
    ctx, eps = pos + 3, 1e-6
    rng = np.random.default_rng(pos + D)
    qkv = rng.standard_normal((1, QH + 2 * KVH, D)).astype(np.float32)
    bias = rng.standard_normal((QH + 2 * KVH, D)).astype(np.float32)
    ng = rng.standard_normal((2, D)).astype(np.float32)
    freq = (10000.0 ** (-np.arange(0, D, 2) / D)).astype(np.float32)
    cache_k = rng.standard_normal((ctx, KVH, D)).astype(np.float32)
    cache_v = rng.standard_normal((ctx, KVH, D)).astype(np.float32)
    scale = 1 / math.sqrt(D)
    step = step_buffer(dev, 1, pos)
    ins = [f32_buffer(dev, a) for a in (qkv, bias, ng, freq)]
    # reference path: rope_store, then attention
    Q, Kc, Vc, O = dev.create_buffer(QH * D * 4), f32_buffer(dev, cache_k), f32_buffer(dev, cache_v), \
        dev.create_buffer(QH * D * 4)
    run(dev, kernels.rope_store(QH, KVH, D, neox, qk_norm, eps), ins + [Q, Kc, Vc, step], (QH + 2 * KVH, 1, 1))
    run(dev, kernels.attention(QH, KVH, D, scale), [Q, Kc, Vc, O, step], kernels.attention_groups(QH, KVH, D, 1))
    # fused path, on its own copy of the cache
    Kc2, Vc2, O2 = f32_buffer(dev, cache_k), f32_buffer(dev, cache_v), dev.create_buffer(QH * D * 4)
    run(dev, kernels.attention_decode(QH, KVH, D, neox, scale, qk_norm, eps), ins + [Kc2, Vc2, O2, step],
        kernels.attention_decode_groups(QH, KVH, D))
    np.testing.assert_allclose(read(dev, O2, QH * D), read(dev, O, QH * D), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(read(dev, Kc2, ctx * KVH * D), read(dev, Kc, ctx * KVH * D), atol=1e-5)
    np.testing.assert_allclose(read(dev, Vc2, ctx * KVH * D), read(dev, Vc, ctx * KVH * D), atol=1e-6)


# GQA ratios 1, 2, 3; head sizes 32, 64, 128 (and 36: a row of 9 vec4s) with 32, 16, 8, 28 query rows a workgroup,
# so T and T * H / KV are mostly not multiples of it; earlier chunks in the cache (pos0 > 0) and a first chunk
# (keys tiles of 30, 16, 8, 28 then end inside a tile); T_max > T: rows of tokens past the pass must not write
@pytest.mark.parametrize("H,KV,D,pos0,T,T_max", [(9, 3, 64, 0, 5, 5), (9, 3, 64, 37, 21, 24), (4, 1, 32, 300, 3, 3),
                                                 (2, 2, 128, 0, 1, 1), (4, 2, 128, 13, 19, 25), (6, 3, 32, 70, 45, 50),
                                                 (3, 3, 64, 511, 17, 17), (4, 4, 36, 5, 29, 32)])
def test_attention(dev, H, KV, D, pos0, T, T_max):
    ctx = pos0 + T + 4
    rng = np.random.default_rng(5)
    q = rng.standard_normal((T_max, H, D)).astype(np.float32)
    k = rng.standard_normal((ctx, KV, D)).astype(np.float32)
    v = rng.standard_normal((ctx, KV, D)).astype(np.float32)
    k[pos0 + T:] = np.nan   # cache rows past the pass are not filled
    v[pos0 + T:] = np.nan
    bufs = [upload(dev, a) for a in (q, k, v)]
    O = upload(dev, np.full_like(q, 7.0))
    scale = 1 / math.sqrt(D)
    run(dev, kernels.attention(H, KV, D, scale), bufs + [O, step_buffer(dev, T, pos0)],
        kernels.attention_groups(H, KV, D, T_max))
    want = np.full_like(q, 7.0)
    for t in range(T):
        n = pos0 + t + 1
        for h in range(H):
            g = h // (H // KV)
            s = k[:n, g] @ q[t, h] * scale
            p = np.exp(s - s.max()); p /= p.sum()
            want[t, h] = p @ v[:n, g]
    np.testing.assert_allclose(read(dev, O, q.size).reshape(q.shape), want, rtol=1e-4, atol=1e-4)


# heads of 64 (the tiled kernel's): GQA ratios 1, 3, 4; first chunks and chunks after earlier ones; T * G not a
# multiple of the 32 rows of a workgroup, keys ending inside a tile, T_max > T (rows past the pass must not write),
# sliding windows shorter than a tile and longer, starting in different tiles for one workgroup's rows
@pytest.mark.parametrize("H,KV,pos0,T,T_max,W", [(9, 3, 0, 5, 5, 0), (9, 3, 37, 21, 24, 0), (4, 1, 300, 3, 3, 0),
                                                 (2, 2, 0, 70, 70, 0), (8, 2, 13, 45, 50, 0), (9, 3, 100, 64, 64, 16),
                                                 (4, 1, 600, 9, 12, 512), (6, 3, 3, 40, 40, 100), (3, 3, 511, 17, 17, 40)])
@pytest.mark.parametrize("split", [1, 3], ids=["whole", "split3"])
@pytest.mark.parametrize("D,rows", [(64, 32), (64, 64), (128, 32)])
def test_attention_tiled(dev, H, KV, pos0, T, T_max, W, split, D, rows):
    """attention_tiled.wgsl's three tile shapes: heads of 64 in 32 rows (no subgroups), 64 in 64 rows and 128 in 32
    rows (these two use subgroup shuffles: lavapipe's subgroups are 8 wide, the least they take) equal
    attention in float64 numpy (and so attention.wgsl) on every edge of their tiles; split: the key tiles shared by
    3 workgroups a row block (some with none), merged by attention_combine.wgsl."""
    if (D, rows) != (64, 32):
        assert dev.subgroup_size and dev.subgroup_size >= 8
    from test_kernels_gemma import attention_ref
    ctx = pos0 + T + 4
    rng = np.random.default_rng(pos0 + T + W)
    q = (rng.standard_normal((T_max, H, D)) * 2).astype(np.float32)
    k = rng.standard_normal((ctx, KV, D)).astype(np.float32)
    v = rng.standard_normal((ctx, KV, D)).astype(np.float32)
    k[pos0 + T:] = np.nan   # cache rows past the pass are not filled
    v[pos0 + T:] = np.nan
    O = upload(dev, np.full_like(q, 7.0))
    scale = 1 / math.sqrt(D)
    step = step_buffer(dev, T, pos0)
    parts = upload(dev, np.full(split * T_max * H * (D + 4), 7.0, np.float32)) if split > 1 else O
    run(dev, kernels.attention_tiled(H, KV, D, scale, window=W, split=split, tmax=T_max, rows=rows),
        [upload(dev, a) for a in (q, k, v)] + [parts, step], kernels.attention_tiled_groups(H, KV, T_max, split, rows))
    if split > 1:
        run(dev, kernels.attention_combine(H, D, split, T_max), [parts, O, step],
            kernels.attention_combine_groups(H, D, T_max))
    want = np.full(q.shape, 7.0)
    want[:T] = attention_ref(q, k, v, pos0, T, scale, W)
    np.testing.assert_allclose(read(dev, O, q.size).reshape(q.shape), want, rtol=1e-4, atol=1e-4)


def test_attention_tiled_reduces_the_same_with_and_without_subgroups(dev):
    """attention_tiled.wgsl reduces a row's maximum and sum of weights across its 8 threads with subgroup shuffles
    (64 rows) or through workgroup memory (32 rows) in the same butterfly order: the same bits, over several tiles."""
    H, KV, D, pos0, T = 6, 2, 64, 70, 40
    rng = np.random.default_rng(5)
    q = (rng.standard_normal((T, H, D)) * 2).astype(np.float32)
    k, v = (rng.standard_normal((pos0 + T, KV, D)).astype(np.float32) for _ in "kv")
    outs = []
    for rows in (32, 64):
        O = upload(dev, np.zeros_like(q))
        run(dev, kernels.attention_tiled(H, KV, D, 0.125, rows=rows), [upload(dev, a) for a in (q, k, v)]
            + [O, step_buffer(dev, T, pos0)], kernels.attention_tiled_groups(H, KV, T, 1, rows))
        outs.append(read(dev, O, q.size).view(np.uint32))
    assert np.array_equal(outs[0], outs[1])


def test_attention_tiled_selection(monkeypatch):
    """The tiled kernel serves heads of 64 where the device gives its 24 KiB of workgroup memory (WebGPU's default
    16 KiB does not: attention.wgsl then), and CERA_WEB_ATTN_TILED=0 switches it off."""
    assert kernels.ATTENTION_TILED_MEMORY == 24576
    assert kernels.attention_tiled_fits(64, 32768) and not kernels.attention_tiled_fits(64, 16384)
    assert not kernels.attention_tiled_fits(128, 49152) and not kernels.attention_tiled_fits(256, 49152)
    # the 64-row kernel where subgroups have 8+ invocations and 32 KiB are there; else the 32-row one; none on
    # software adapters unless forced
    assert kernels.attention_tiled_rows(64, 32768, False, 32) == 64
    assert kernels.attention_tiled_rows(64, 32768, False, 4) == 32
    assert kernels.attention_tiled_rows(64, 32768, False, None) == 32
    assert kernels.attention_tiled_rows(64, 32767, False, 32) == 32
    assert kernels.attention_tiled_rows(64, 24576, False, 4) == 32      # 24 KiB: the 32-row shape's memory
    assert kernels.attention_tiled_rows(64, 24575, False, 32) == 0
    assert kernels.attention_tiled_rows(128, 32768, False, 32) == 32      # heads of 128: 32 rows with subgroups
    assert kernels.attention_tiled_rows(128, 32767, False, 32) == 0
    assert kernels.attention_tiled_rows(128, 32768, False, 4) == 0
    assert kernels.attention_tiled_rows(256, 65536, False, 32) == 0
    assert kernels.attention_tiled_rows(64, 32768, True, 8) == 0
    monkeypatch.setenv("CERA_WEB_ATTN_TILED", "1")
    assert kernels.attention_tiled_rows(64, 32768, True, 8) == 64
    monkeypatch.setenv("CERA_WEB_ATTN_TILED", "32")
    assert kernels.attention_tiled_rows(64, 32768, True, 8) == 32
    monkeypatch.setenv("CERA_WEB_ATTN_TILED", "64")
    assert kernels.attention_tiled_rows(64, 32768, False, None) == 0     # forced, but cannot run there
    monkeypatch.setenv("CERA_WEB_ATTN_TILED", "2")
    with pytest.raises(ValueError, match="CERA_WEB_ATTN_TILED"):
        kernels.attention_tiled_rows(64, 32768)
    monkeypatch.setenv("CERA_WEB_ATTN_TILED", "0")
    assert not kernels.attention_tiled_fits(64, 49152)
    assert kernels.attention_tiled_rows(64, 49152, False, 32) == 0
    # split where a pass has too few workgroups: SmolLM2 (9 heads on 3) at 512 tokens has 144, so 2 splits; 1B (32
    # on 8) has 512, none; a 16-token pass of SmolLM2 would have 6, but 8 splits at most
    assert kernels.attention_prefill_split(9, 3, 512) == 2
    assert kernels.attention_prefill_split(32, 8, 512) == 1
    assert kernels.attention_prefill_split(9, 3, 16) == 8
    assert kernels.attention_prefill_split(9, 3, 512, rows=64) == 4      # 72 workgroups of 64 rows
    assert kernels.attention_prefill_split(32, 8, 512, rows=64) == 1     # 256
    monkeypatch.setenv("CERA_WEB_ATTN_SPLIT", "3")      # the decode attention's switch: not this one
    assert kernels.attention_prefill_split(32, 8, 512) == 1
    monkeypatch.setenv("CERA_WEB_PREFILL_ATTN_SPLIT", "2")
    assert kernels.attention_prefill_split(32, 8, 512) == 2
    monkeypatch.setenv("CERA_WEB_PREFILL_ATTN_SPLIT", "3")
    with pytest.raises(ValueError, match="CERA_WEB_PREFILL_ATTN_SPLIT"):
        kernels.attention_prefill_split(32, 8, 512)
    with pytest.raises(ValueError):
        kernels.attention_tiled(8, 2, 256, 0.1)
    with pytest.raises(ValueError):
        kernels.attention_tiled(8, 2, 64, 0.1, rows=16)
    with pytest.raises(ValueError):
        kernels.attention_tiled(8, 2, 128, 0.1, rows=64)


def test_swiglu(dev):
    F, T = 70, 3
    rng = np.random.default_rng(6)
    g, u = rng.standard_normal((2, T, F)).astype(np.float32)
    G = upload(dev, g)
    U = upload(dev, u)
    H = dev.create_buffer(g.nbytes)
    run(dev, kernels.swiglu(F), [G, U, H, step_buffer(dev, T)], (2, T, 1))
    np.testing.assert_allclose(read(dev, H, g.size).reshape(T, F), g / (1 + np.exp(-g)) * u, rtol=1e-5, atol=1e-6)


# ties (the lower index wins): across threads; within one thread's group of four loads; across its groups; a maximum
# in the tail after the last full group of 1024
@pytest.mark.parametrize("top", [(1234, 40000), (300, 812), (300, 300 + 3 * 1024), (49156,)])
def test_argmax(dev, top):
    V = 49157
    rng = np.random.default_rng(7)
    logits = rng.standard_normal(V).astype(np.float32)
    logits[list(top)] = 9.0
    L = upload(dev, logits)
    tok = dev.create_buffer(16); log = dev.create_buffer(64)
    run(dev, kernels.argmax(V), [L, tok, log, step_buffer(dev, 1, out_index=5)], (1, 1, 1))
    assert read(dev, tok, 1, np.uint32)[0] == top[0]
    assert read(dev, log, 16, np.uint32)[5] == top[0]


# the two-stage argmax of large vocabularies: ties inside a slice, across slices (2047 | 2048), in the last partial
# slice, and a vocabulary of one slice plus one logit
@pytest.mark.parametrize("V,top", [(49157, (1234, 40000)), (49157, (2048, 2047)), (49157, (49156,)),
                                   (49157, (4097, 4096 + 300)), (2049, (2048,)), (128256, (70001, 128255))])
def test_argmax_two_stage(dev, V, top):
    rng = np.random.default_rng(V)
    logits = rng.standard_normal(V).astype(np.float32)
    logits[list(top)] = 9.0
    parts = -(-V // kernels.ARGMAX_SLICE)
    L, P = upload(dev, logits), dev.create_buffer(8 * parts)
    tok = dev.create_buffer(16); log = dev.create_buffer(64)
    run(dev, kernels.argmax_parts(V), [L, P], (parts, 1, 1))
    run(dev, kernels.argmax(parts, pairs=True), [P, tok, log, step_buffer(dev, 1, out_index=5)], (1, 1, 1))
    want = min(top)
    assert read(dev, tok, 1, np.uint32)[0] == want
    assert read(dev, log, 16, np.uint32)[5] == want


def test_early_submit_keeps_order_and_copies(dev):
    """Device.submit(early=True) (prefill chunks) sends a long dispatch list in several command buffers: 100
    dispatches alternating two non-commuting updates of one word give the same value as one command buffer, the
    copies run after all of them, and it took 2 submissions (32, then the remaining 68) against 1."""
    op = ("@group(0) @binding(0) var<storage, read_write> Y: array<u32>;\n"
          "@compute @workgroup_size(1) fn main() {{ Y[0] = Y[0] * {}u + {}u; }}")
    pipes = [dev.pipeline(op.format(3, 1)), dev.pipeline(op.format(5, 2))]
    want = 7
    for i in range(100):
        want = (want * (3, 5)[i % 2] + (1, 2)[i % 2]) % 2**32
    got = []
    for early in (False, True):
        y = upload(dev, np.array([7], np.uint32))
        out = upload(dev, np.zeros(1, np.uint32))
        binds = [dev.bind(p, [y]) for p in pipes]
        half = [(pipes[i % 2], binds[i % 2], (1, 1, 1)) for i in range(50)]
        plans = [dev.record(half), dev.record(half)]
        before = dev.submits
        dev.submit(plans, [(y, 0, out, 0, 4)], early=early)
        got.append((int(read(dev, out, 1, np.uint32)[0]), dev.submits - before))
    assert got == [(want, 1), (want, 2)]


def test_bench_kernels_times_prefill_attention(dev):
    """bench_kernels --attention: the prefill attention a GPU would run (lavapipe's subgroups and memory take the
    64-row tiled kernel for heads of 64, the 32-row one for 128, attention.wgsl for 96) per head layout
    and split, GFLOP/s from the causal key count (T tokens after pos0: 4 * head size * heads * sum of keys)."""
    import asyncio

    from cera_web.tools import bench_kernels
    out = asyncio.run(bench_kernels.run([], [], device=dev, repeats=1, target_ms=1, rotate_mib=1, gemm_tokens=8,
                                        attention=[(4, 2)], attention_pos0=3, splits=[1, 2]))
    rows = out["attention"]
    assert [(r["heads"], r["kv_heads"], r["T"], r["pos0"], r["split"]) for r in rows] == [(4, 2, 8, 3, 1), (4, 2, 8, 3, 2)]
    assert [(r["kernel"], r["rows"]) for r in rows] == [("attention_tiled", 64)] * 2
    flop = 4 * 64 * 4 * sum(3 + t + 1 for t in range(8))
    assert all(r["us"] > 0 and abs(r["gflops"] - flop / r["us"] / 1e3) <= 0.05 + 1e-3 * r["gflops"] for r in rows)
    for D, kernel, split in ((128, "attention_tiled", kernels.attention_prefill_split(4, 2, 8, 32)),
                             (96, "attention", 1)):
        out = asyncio.run(bench_kernels.run([], [], device=dev, repeats=1, target_ms=1, rotate_mib=1, gemm_tokens=8,
                                            attention=[(4, 2)], head_dim=D))
        (r,) = out["attention"]
        assert (r["kernel"], r["head_dim"], r["split"]) == (kernel, D, split)
        assert abs(r["gflops"] - 4 * D * 4 * sum(t + 1 for t in range(8)) / r["us"] / 1e3) <= 0.05 + 1e-3 * r["gflops"]


def test_decode_heads_blocks():
    """attention_decode.wgsl's blocks of query heads: a group's heads in the fewest blocks of at most 4, as even as
    they come; one head a workgroup for heads over 256 wide; the scores' keys a pass fit 16 KiB of workgroup memory."""
    assert [kernels.decode_heads(g, 1, 64) for g in range(1, 10)] == [1, 2, 3, 4, 3, 3, 4, 4, 3]
    assert kernels.decode_heads(8, 2, 256) == 4 and kernels.decode_heads(8, 2, 512) == 1
    assert [kernels.attention_decode_groups(q, kv, 64, 5) for q, kv in ((32, 8), (14, 2), (12, 2), (9, 3))] == \
        [(8, 5, 1), (4, 5, 1), (4, 5, 1), (3, 5, 1)]
    assert kernels.attention_decode_groups(14, 2, 64, 5, 16) == (4, 5, 16)
    assert kernels.attention_decode_groups(14, 2, 64, 5, 16, mode="store") == (2, 1, 16)
    for q, kv, d, keys in ((32, 8, 64, 512), (12, 2, 128, 512), (4, 1, 256, 256), (2, 1, 512, 256)):
        text = kernels.attention_decode(q, kv, d, True, 0.1)
        assert f"const KEYS: u32 = {keys}u;" in text
        gb = kernels.decode_heads(q, kv, d)
        assert 4 * (gb + 2) * d + 16 * keys + 16 * 256 <= 16384
