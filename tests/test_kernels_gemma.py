"""The kernel forms Gemma 3 needs, against numpy on the native backend (wgpu; lavapipe on CI): GeGLU (tanh GELU) in
the matrix-vector, tiled and stand-alone gated kernels, the scaled embedding lookup, the post-norm residual add, and
sliding-window attention (prefill and decode)."""
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


def gelu_tanh(x):
    """GELU with the tanh approximation, as torch's gelu(approximate='tanh') writes it (in float64)."""
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def rmsnorm_ref(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def quantize(fmt, w):
    if fmt == GGMLType.F32:
        return w.astype(np.float32).tobytes(), w
    raw = quants.quantize_q8_0(w).tobytes()
    return raw, quants.dequantize(raw, fmt, w.shape)


def test_gelu_tanh_saturates_without_overflow(dev):
    # large |g| (exp overflows to inf inside) must give g and 0, not NaN
    g = np.array([[-300.0, -30.0, -5.0, -1.0, -0.1, 0.0, 0.1, 1.0, 5.0, 30.0, 300.0, 1e-3]], np.float32)
    u = np.ones_like(g)
    G, U, H = upload(dev, g), upload(dev, u), dev.create_buffer(g.nbytes)
    run(dev, kernels.swiglu(g.shape[1], gelu=True), [G, U, H, step_buffer(dev, 1)], (1, 1, 1))
    np.testing.assert_allclose(read(dev, H, g.size), gelu_tanh(g[0]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fmt", [GGMLType.F32, GGMLType.Q8_0], ids=lambda f: f.name)
@pytest.mark.parametrize("T,lanes,tokens", [(1, 32, 1), (3, 1, 8), (10, 4, 8)])
def test_matmul_norm_geglu(dev, fmt, T, lanes, tokens):
    K, N, eps = 128, 37, 1e-6
    rng = np.random.default_rng(T + lanes)
    w = rng.standard_normal((2 * N, K)).astype(np.float32)
    raw, wq = quantize(fmt, w)
    x = (rng.standard_normal((T, K)) * 3).astype(np.float32)
    g = rng.standard_normal(K).astype(np.float32)
    W, X, G, Y = upload(dev, raw), f32_buffer(dev, x), f32_buffer(dev, g), dev.create_buffer(T * N * 4)
    run(dev, kernels.matmul(fmt, K, N, norm=True, eps=eps, glu=True, tokens=tokens, lanes=lanes, gelu=True),
        [W, X, Y, step_buffer(dev, T), G], kernels.spread(kernels.matmul_groups(N, lanes)))
    xn = rmsnorm_ref(x, g, eps)
    want = gelu_tanh(xn @ wq[:N].T) * (xn @ wq[N:].T)
    np.testing.assert_allclose(read(dev, Y, T * N).reshape(T, N), want, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("tile", kernels.TILES[:2] + kernels.TILES[3:], ids=lambda t: "x".join(map(str, t)))
def test_matmul_tiled_geglu(dev, tile):
    K, N, T, eps, stride, yoff = 96, 45, 40, 1e-6, 50, 3
    rng = np.random.default_rng(11)
    w = rng.standard_normal((2 * N, K)).astype(np.float32)
    raw, wq = quantize(GGMLType.Q8_0, w)
    x = (rng.standard_normal((T, K)) * 2).astype(np.float32)
    g = rng.standard_normal(K).astype(np.float32)
    y0 = rng.standard_normal((T, stride)).astype(np.float32)
    W, X, G, Y = upload(dev, raw), f32_buffer(dev, x), f32_buffer(dev, g), f32_buffer(dev, y0)
    gx, gy, _ = kernels.tiled_groups(N, T, tile)
    run(dev, kernels.matmul_tiled(GGMLType.Q8_0, K, N, norm=True, eps=eps, glu=True, ystride=stride, yoff=yoff,
                                  tile=tile, gelu=True), [W, X, Y, step_buffer(dev, T), G], (gx, gy, 1))
    xn = rmsnorm_ref(x, g, eps)
    want = y0.copy()
    want[:, yoff:yoff + N] = gelu_tanh(xn @ wq[:N].T) * (xn @ wq[N:].T)
    np.testing.assert_allclose(read(dev, Y, T * stride).reshape(T, stride), want, rtol=2e-4, atol=2e-4)


def test_geglu_standalone(dev):
    F, T = 70, 3
    rng = np.random.default_rng(6)
    g, u = (rng.standard_normal((2, T, F)) * 3).astype(np.float32)
    G, U, H = upload(dev, g), upload(dev, u), dev.create_buffer(g.nbytes)
    run(dev, kernels.swiglu(F, gelu=True), [G, U, H, step_buffer(dev, T)], (2, T, 1))
    np.testing.assert_allclose(read(dev, H, g.size).reshape(T, F), gelu_tanh(g) * u, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", [GGMLType.F32, GGMLType.Q8_0], ids=lambda f: f.name)
def test_embed_scaled_and_split(dev, fmt):
    """Rows times sqrt(K), through two row ranges (the first writes every token, the second its own ids)."""
    V, K = 48, 96
    rng = np.random.default_rng(2)
    raw, table = quantize(fmt, rng.standard_normal((V, K)).astype(np.float32))
    ids = np.array([3, 0, 47, 20, 7, 33], np.uint32)
    scale = math.sqrt(K)
    Y = dev.create_buffer(len(ids) * K * 4)
    I = upload(dev, ids)
    row_bytes = len(raw) // V
    for row0, n in ((0, 32), (32, 16)):
        W = upload(dev, raw[row0 * row_bytes:(row0 + n) * row_bytes])
        run(dev, kernels.embed(fmt, K, n, row0=row0, vocab=V, scale=scale), [W, I, Y, step_buffer(dev, len(ids))],
            (1, len(ids), 1))
    want = table[ids] * np.float32(scale)
    np.testing.assert_allclose(read(dev, Y, len(ids) * K).reshape(len(ids), K), want, rtol=1e-6, atol=1e-5)


def test_rmsnorm_accum_is_a_post_norm_residual_add(dev):
    K, T, eps = 640, 5, 1e-6
    rng = np.random.default_rng(3)
    y = (rng.standard_normal((T, K)) * 4).astype(np.float32)
    w = (1 + rng.standard_normal(K)).astype(np.float32)
    x0 = rng.standard_normal((T + 1, K)).astype(np.float32)      # one row past the pass: untouched
    X, G, R = upload(dev, y), upload(dev, w), f32_buffer(dev, x0)
    run(dev, kernels.rmsnorm(K, eps, accum=True), [X, G, R, step_buffer(dev, T)], (T + 1, 1, 1))
    want = x0.copy()
    want[:T] += rmsnorm_ref(y, w, eps)
    np.testing.assert_allclose(read(dev, R, x0.size).reshape(x0.shape), want, rtol=1e-5, atol=1e-5)


def attention_ref(q, k, v, pos0, T, scale, window):
    H, KV = q.shape[1], k.shape[1]
    out = np.zeros((T, H, q.shape[2]))
    for t in range(T):
        n = pos0 + t + 1
        lo = max(0, n - window) if window else 0
        for h in range(H):
            g = h // (H // KV)
            s = k[lo:n, g].astype(np.float64) @ q[t, h] * scale
            p = np.exp(s - s.max())
            out[t, h] = (p / p.sum()) @ v[lo:n, g]
    return out


# windows shorter than a key tile and longer; chunks starting before and after the window fills; rows of one
# workgroup whose windows start in different tiles
@pytest.mark.parametrize("H,KV,D,pos0,T,W", [(4, 1, 256, 0, 21, 8), (4, 2, 32, 13, 19, 8), (9, 3, 64, 37, 21, 16),
                                             (6, 3, 32, 70, 45, 40), (4, 1, 256, 600, 9, 512), (4, 2, 64, 3, 5, 100)])
def test_attention_sliding_window(dev, H, KV, D, pos0, T, W):
    ctx = pos0 + T + 2
    rng = np.random.default_rng(pos0 + T)
    q = rng.standard_normal((T, H, D)).astype(np.float32)
    k = rng.standard_normal((ctx, KV, D)).astype(np.float32)
    v = rng.standard_normal((ctx, KV, D)).astype(np.float32)
    k[pos0 + T:] = np.nan
    v[pos0 + T:] = np.nan
    scale = 1 / math.sqrt(D)
    O = dev.create_buffer(q.nbytes)
    run(dev, kernels.attention(H, KV, D, scale, window=W), [upload(dev, a) for a in (q, k, v)] +
        [O, step_buffer(dev, T, pos0)], kernels.attention_groups(H, KV, D, T))
    want = attention_ref(q, k, v, pos0, T, scale, W)
    np.testing.assert_allclose(read(dev, O, q.size).reshape(q.shape), want, rtol=1e-4, atol=1e-4)
    assert pos0 + T <= W or not np.allclose(want, attention_ref(q, k, v, pos0, T, scale, 0))


@pytest.mark.parametrize("QH,KVH,D,pos,W", [(4, 1, 256, 20, 8), (4, 2, 32, 5, 8), (3, 1, 64, 1500, 512),
                                           (2, 1, 128, 1100, 1030)])
def test_attention_decode_sliding_window(dev, QH, KVH, D, pos, W):
    """Decode attention with the window: rope and storing as without it, keys pos + 1 - W .. pos only."""
    ctx, eps = pos + 3, 1e-6
    rng = np.random.default_rng(pos + D)
    qkv = rng.standard_normal((1, QH + 2 * KVH, D)).astype(np.float32)
    zeros = np.zeros((QH + 2 * KVH, D), np.float32)
    freq = (10000.0 ** (-np.arange(0, D, 2) / D)).astype(np.float32)
    cache_k = rng.standard_normal((ctx, KVH, D)).astype(np.float32)
    cache_v = rng.standard_normal((ctx, KVH, D)).astype(np.float32)
    scale = 1 / math.sqrt(D)
    step = step_buffer(dev, 1, pos)
    ins = [f32_buffer(dev, a) for a in (qkv, zeros, np.ones((2, D)), freq)]
    # rope_store gives the rotated q and this position's k/v in the cache; the numpy window over that cache
    Q, Kc, Vc = dev.create_buffer(QH * D * 4), f32_buffer(dev, cache_k), f32_buffer(dev, cache_v)
    run(dev, kernels.rope_store(QH, KVH, D, True), ins + [Q, Kc, Vc, step], (QH + 2 * KVH, 1, 1))
    q = read(dev, Q, QH * D).reshape(1, QH, D)
    k = read(dev, Kc, ctx * KVH * D).reshape(ctx, KVH, D)
    v = read(dev, Vc, ctx * KVH * D).reshape(ctx, KVH, D)
    want = attention_ref(q, k, v, pos, 1, scale, W)
    Kc2, Vc2, O = f32_buffer(dev, cache_k), f32_buffer(dev, cache_v), dev.create_buffer(QH * D * 4)
    run(dev, kernels.attention_decode(QH, KVH, D, True, scale, window=W), ins + [Kc2, Vc2, O, step],
        kernels.attention_decode_groups(QH, KVH, D))
    np.testing.assert_allclose(read(dev, O, QH * D).reshape(1, QH, D), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(read(dev, Kc2, ctx * KVH * D).reshape(ctx, KVH, D), k, atol=1e-5)
    assert pos + 1 <= W or not np.allclose(want, attention_ref(q, k, v, pos, 1, scale, 0))


# -- the KV cache in halves (Engine.load kv_cache="f16", the shader-f16 feature) ----------------------------------


@pytest.fixture(scope="module")
def dev16(dev):
    if "shader-f16" not in dev.features:
        pytest.skip("this adapter has no shader-f16")
    return dev


def halves(a):
    """a rounded to float16, as float32 (what a kv_cache="f16" cache holds)."""
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


@pytest.mark.parametrize("neox,qk_norm", [(False, False), (True, True)])
def test_rope_store_into_a_half_cache(dev16, neox, qk_norm):
    """rope_store with KV16 stores the same keys and values as the f32 kernel, rounded to the nearest half (within
    half a unit of the last place of f16: the GPU's conversion may round a tie the other way)."""
    dev = dev16
    QH, KVH, D, T, pos0, ctx = 4, 2, 64, 5, 3, 12
    rng = np.random.default_rng(11)
    qkv = rng.standard_normal((T, QH + 2 * KVH, D)).astype(np.float32) * 3
    ins = [f32_buffer(dev, a) for a in (qkv, rng.standard_normal((QH + 2 * KVH, D)), rng.uniform(0.5, 1.5, (2, D)),
                                        10000.0 ** (-np.arange(0, D, 2) / D))]
    step = step_buffer(dev, T, pos0)
    Q, Kc, Vc = dev.create_buffer(4 * T * QH * D), dev.create_buffer(4 * ctx * KVH * D), dev.create_buffer(4 * ctx * KVH * D)
    run(dev, kernels.rope_store(QH, KVH, D, neox, qk_norm), ins + [Q, Kc, Vc, step], (QH + 2 * KVH, T, 1))
    Q2, K2, V2 = dev.create_buffer(4 * T * QH * D), dev.create_buffer(2 * ctx * KVH * D), dev.create_buffer(2 * ctx * KVH * D)
    run(dev, kernels.rope_store(QH, KVH, D, neox, qk_norm, kv16=True), ins + [Q2, K2, V2, step], (QH + 2 * KVH, T, 1))
    np.testing.assert_array_equal(read(dev, Q2, T * QH * D), read(dev, Q, T * QH * D))
    for full, half in ((Kc, K2), (Vc, V2)):
        want = read(dev, full, ctx * KVH * D)
        got = read(dev, half, ctx * KVH * D, np.float16).astype(np.float32)
        assert np.all(np.abs(got - want) <= np.abs(want) * 2.0 ** -11 * 1.001), np.max(np.abs(got - want))
        assert not got[:pos0 * KVH * D].any() and got[pos0 * KVH * D:(pos0 + T) * KVH * D].any()


@pytest.mark.parametrize("H,KV,D,pos0,T,W", [(9, 3, 64, 37, 21, 0), (4, 1, 256, 600, 9, 512), (4, 2, 32, 13, 19, 8)])
def test_attention_over_a_half_cache(dev16, H, KV, D, pos0, T, W):
    """attention.wgsl with KV16 reads f16 keys and values: the result of the f32 kernel on the same (f16-exact)
    values."""
    dev = dev16
    ctx = pos0 + T + 2
    rng = np.random.default_rng(pos0 + D)
    q = rng.standard_normal((T, H, D)).astype(np.float32)
    k, v = halves(rng.standard_normal((ctx, KV, D))), halves(rng.standard_normal((ctx, KV, D)))
    scale, step = 1 / math.sqrt(D), step_buffer(dev, T, pos0)
    O32, O16 = dev.create_buffer(4 * T * H * D), dev.create_buffer(4 * T * H * D)
    groups = kernels.attention_groups(H, KV, D, T)
    run(dev, kernels.attention(H, KV, D, scale, W), [upload(dev, q), upload(dev, k), upload(dev, v), O32, step], groups)
    run(dev, kernels.attention(H, KV, D, scale, W, kv16=True),
        [upload(dev, q), upload(dev, k.astype(np.float16)), upload(dev, v.astype(np.float16)), O16, step], groups)
    np.testing.assert_allclose(read(dev, O16, T * H * D), read(dev, O32, T * H * D), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(read(dev, O16, T * H * D).reshape(T, H, D), attention_ref(q, k, v, pos0, T, scale, W),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("W", [0, 16])
@pytest.mark.parametrize("D,rows", [(64, 32), (64, 64), (128, 32)])
def test_tiled_attention_over_a_half_cache(dev16, W, D, rows):
    """attention_tiled.wgsl's three tile shapes (heads of 64 in 32 and 64 rows, of 128 in 32) with KV16:
    the f32 kernel's result on the same f16-exact keys and values."""
    dev, H, KV, pos0, T = dev16, 9, 3, 37, 21
    ctx = pos0 + T + 2
    rng = np.random.default_rng(W + 3)
    q = rng.standard_normal((T, H, D)).astype(np.float32)
    k, v = halves(rng.standard_normal((ctx, KV, D))), halves(rng.standard_normal((ctx, KV, D)))
    scale, step = 1 / math.sqrt(D), step_buffer(dev, T, pos0)
    O32, O16 = dev.create_buffer(4 * T * H * D), dev.create_buffer(4 * T * H * D)
    groups = kernels.attention_tiled_groups(H, KV, T, rows=rows)
    run(dev, kernels.attention_tiled(H, KV, D, scale, W, rows=rows), [upload(dev, q), upload(dev, k), upload(dev, v), O32, step],
        groups)
    run(dev, kernels.attention_tiled(H, KV, D, scale, W, kv16=True, rows=rows),
        [upload(dev, q), upload(dev, k.astype(np.float16)), upload(dev, v.astype(np.float16)), O16, step], groups)
    np.testing.assert_allclose(read(dev, O16, T * H * D), read(dev, O32, T * H * D), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(read(dev, O16, T * H * D).reshape(T, H, D), attention_ref(q, k, v, pos0, T, scale, W),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("QH,KVH,D,pos,W", [(9, 3, 64, 300, 0), (4, 1, 256, 20, 8)])
def test_decode_attention_over_a_half_cache(dev16, QH, KVH, D, pos, W):
    """attention_decode.wgsl with KV16: its own key and value are stored rounded to halves and used rounded (as later
    steps will read them; a compiler may skip that rounding); the result is numpy's attention over the half cache."""
    dev = dev16
    ctx, eps = pos + 3, 1e-6
    rng = np.random.default_rng(pos + D)
    qkv = rng.standard_normal((1, QH + 2 * KVH, D)).astype(np.float32)
    freq = (10000.0 ** (-np.arange(0, D, 2) / D)).astype(np.float32)
    ins = [f32_buffer(dev, a) for a in (qkv, np.zeros((QH + 2 * KVH, D)), np.ones((2, D)), freq)]
    cache_k, cache_v = halves(rng.standard_normal((ctx, KVH, D))), halves(rng.standard_normal((ctx, KVH, D)))
    scale, step = 1 / math.sqrt(D), step_buffer(dev, 1, pos)
    # this token's rotated q, k and v from rope_store (f32), then rounded k and v in the cache at pos
    Q, Kc, Vc = dev.create_buffer(QH * D * 4), f32_buffer(dev, cache_k), f32_buffer(dev, cache_v)
    run(dev, kernels.rope_store(QH, KVH, D, True), ins + [Q, Kc, Vc, step], (QH + 2 * KVH, 1, 1))
    q = read(dev, Q, QH * D).reshape(1, QH, D)
    k = halves(read(dev, Kc, ctx * KVH * D)).reshape(ctx, KVH, D)
    v = halves(read(dev, Vc, ctx * KVH * D)).reshape(ctx, KVH, D)
    K16, V16, O = upload(dev, cache_k.astype(np.float16)), upload(dev, cache_v.astype(np.float16)), \
        dev.create_buffer(QH * D * 4)
    run(dev, kernels.attention_decode(QH, KVH, D, True, scale, window=W, kv16=True), ins + [K16, V16, O, step],
        kernels.attention_decode_groups(QH, KVH, D))
    got_k = read(dev, K16, ctx * KVH * D, np.float16).astype(np.float32).reshape(ctx, KVH, D)
    got_v = read(dev, V16, ctx * KVH * D, np.float16).astype(np.float32).reshape(ctx, KVH, D)
    # the stored key and value of this position: rope_store's, rounded to halves (a value whose float32 differs in
    # the last bits between the two kernels may round to the neighbouring half)
    for got, want in ((got_k[pos], k[pos]), (got_v[pos], v[pos])):
        assert np.all(np.abs(got - want) <= np.abs(want) * 2.0 ** -10 + 1e-7), np.max(np.abs(got - want))
    np.testing.assert_array_equal(got_k[:pos], cache_k[:pos])
    # the output: attention over the cache as stored, this position's key and value included (within 2e-3: NVIDIA's
    # compiler may keep this position's float32 key and value instead of their rounded copies, H200 call 3)
    np.testing.assert_allclose(read(dev, O, QH * D).reshape(1, QH, D), attention_ref(q, got_k, got_v, pos, 1, scale, W),
                               rtol=1e-4, atol=2e-3)


@pytest.mark.browser
def test_tiled_attention_runs_in_chromium(page, server_url):
    """Chromium's WGSL compiler (Tint) accepts attention_tiled.wgsl's three tile shapes (f32 and, where the adapter has shader-f16, f16 caches; with and without a window;
    split, and attention_combine.wgsl) with the adapter's workgroup memory and subgroups, and the kernels for heads
    of 64 run there equal numpy (the page itself keeps attention.wgsl on SwiftShader, a CPU adapter; real GPUs take
    these)."""
    H, KV, D, pos0, T, W = 9, 3, 64, 5, 40, 0
    ctx = pos0 + T
    rng = np.random.default_rng(11)
    q = rng.standard_normal((T, H, D)).astype(np.float32)
    k = rng.standard_normal((ctx, KV, D)).astype(np.float32)
    v = rng.standard_normal((ctx, KV, D)).astype(np.float32)
    scale = 1 / math.sqrt(D)
    texts = [kernels.attention_tiled(H, KV, D, scale, w, kv16) for w in (0, 16) for kv16 in (False, True)]
    texts += [kernels.attention_tiled(H, KV, D, scale, 0, False, 4, 512), kernels.attention_combine(H, D, 4, 512)]
    wide = [kernels.attention_tiled(H, KV, D, scale, w, kv16, rows=64) for w in (0, 16) for kv16 in (False, True)]
    texts += wide + [kernels.attention_tiled(H, KV, D, scale, 0, False, 4, 512, rows=64)]
    texts += [kernels.attention_tiled(H, KV, 128, scale, w, kv16) for w in (0, 16) for kv16 in (False, True)]
    texts += [kernels.attention_tiled(H, KV, 128, scale, 0, False, 4, 512), kernels.attention_combine(H, 128, 4, 512)]
    page.goto(server_url + "/models/index.json")      # a secure context that loads no model
    result = page.evaluate("""async ([texts, q, k, v, step, runs, outLen]) => {
        const adapter = await navigator.gpu.requestAdapter();
        const features = ["shader-f16", "subgroups"].filter((f) => adapter.features.has(f));
        const f16 = features.includes("shader-f16");
        const memory = adapter.limits.maxComputeWorkgroupStorageSize;
        const device = await adapter.requestDevice({requiredFeatures: features,
                                                    requiredLimits: {maxComputeWorkgroupStorageSize: memory}});
        const errors = [];
        const pipes = {};                         // text index -> pipeline
        for (const [at, code] of texts.entries()) {
            if (code.includes("enable f16;") && !f16) continue;
            device.pushErrorScope("validation");
            const module = device.createShaderModule({code});
            const info = await module.getCompilationInfo();
            for (const m of info.messages) if (m.type === "error") errors.push(m.message);
            pipes[at] = device.createComputePipeline({layout: "auto", compute: {module, entryPoint: "main"}});
            const e = await device.popErrorScope();
            if (e) errors.push(e.message);
        }
        const buf = (data, usage) => {
            const b = device.createBuffer({size: data.byteLength, usage: usage | GPUBufferUsage.COPY_DST});
            device.queue.writeBuffer(b, 0, data);
            return b;
        };
        const S = GPUBufferUsage.STORAGE;
        const outs = [];
        const info = adapter.info || {};
        for (const [index, groups, sgmin] of runs) {    // the f32 kernels without a window: texts[index]
            if ((info.subgroupMinSize || 0) < sgmin) continue;
            const out = device.createBuffer({size: outLen * 4, usage: S | GPUBufferUsage.COPY_SRC});
            const group = device.createBindGroup({layout: pipes[index].getBindGroupLayout(0), entries: [
                buf(new Float32Array(q), S), buf(new Float32Array(k), S), buf(new Float32Array(v), S), out,
                buf(new Uint32Array(step), GPUBufferUsage.UNIFORM)].map((b, i) => ({binding: i, resource: {buffer: b}}))});
            const enc = device.createCommandEncoder();
            const pass = enc.beginComputePass();
            pass.setPipeline(pipes[index]);
            pass.setBindGroup(0, group);
            pass.dispatchWorkgroups(...groups);
            pass.end();
            const staging = device.createBuffer({size: outLen * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
            enc.copyBufferToBuffer(out, 0, staging, 0, outLen * 4);
            device.queue.submit([enc.finish()]);
            await staging.mapAsync(GPUMapMode.READ);
            outs.push(Array.from(new Float32Array(staging.getMappedRange())));
        }
        return {memory, f16, subgroups: features.includes("subgroups"), compiled: Object.keys(pipes).length, errors,
                outs, sgmin: info.subgroupMinSize, sgmax: info.subgroupMaxSize};
    }""", [texts, q.ravel().tolist(), k.ravel().tolist(), v.ravel().tolist(), [T, pos0, 0, pos0 + T],
           [[0, list(kernels.attention_tiled_groups(H, KV, T)), 0],
            [6, list(kernels.attention_tiled_groups(H, KV, T, rows=64)), 8]], q.size])
    assert result["errors"] == [], result["errors"][:3]
    assert result["subgroups"] and result["memory"] >= kernels.ATTENTION_TILED_SG_MEMORY
    assert result["compiled"] == (17 if result["f16"] else 11)
    # the 64-row kernel runs where subgroups have 8 invocations or more (SwiftShader's have 4: there the engine
    # picks the 32-row kernel, as checked here, and this run leaves it out)
    runs_wide = result["sgmin"] is not None and result["sgmin"] >= 8
    assert len(result["outs"]) == 1 + runs_wide
    assert kernels.attention_tiled_rows(D, result["memory"], False, result["sgmin"]) == (64 if runs_wide else 32)
    for out in result["outs"]:
        got = np.array(out, np.float32).reshape(q.shape)
        np.testing.assert_allclose(got, attention_ref(q, k, v, pos0, T, scale, W), rtol=1e-4, atol=1e-4)
