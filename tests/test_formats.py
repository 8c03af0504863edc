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

import numpy as np
import pytest

from cera_web import kernels, quants
from cera_web.gguf import GGML_BLOCK, GGMLType
from gpu_helpers import read, run, step_buffer, upload

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


def row_len(fmt, blocks):
    """A row length of `blocks` format blocks (k-quants: 256-weight super-blocks)."""
    return blocks * (GGML_BLOCK[fmt][0] if GGML_BLOCK[fmt][0] > 1 else 8)


# (blocks per row, rows, tokens, lanes, tokens per pass): rows not a multiple of the workgroup's 64 / lanes rows;
# lanes striding over more blocks than lanes and fewer; token counts below and above a pass
CASES = [(3, 7, 1, 32, 1), (3, 70, 3, 1, 8), (5, 9, 3, 32, 8), (6, 5, 11, 4, 8), (4, 67, 1, 1, 1)]


@pytest.mark.parametrize("fmt", NEW, ids=lambda f: f.name)
@pytest.mark.parametrize("blocks,N,T,lanes,tb", CASES)
def test_matmul(dev, fmt, blocks, N, T, lanes, tb):
    check_matmul(dev, fmt, blocks, N, T, lanes, tb)


# the decode shapes of the matrix-vector kernel (kernels.matvec_shape): rows per thread, workgroup sizes, subgroup
# shuffles (lanes no wider than lavapipe's subgroups of 8), rows not a multiple of a workgroup's rows
SHAPES = [dict(lanes=8, rpt=4, wg=64, sg=True), dict(lanes=4, rpt=2, wg=128, sg=True),
          dict(lanes=32, rpt=2, wg=256, sg=False), dict(lanes=8, rpt=1, wg=64, sg=True)]


@pytest.mark.parametrize("fmt", NEW, ids=lambda f: f.name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(f"{k}{int(v)}" for k, v in s.items()))
def test_matmul_decode_shapes(dev, fmt, shape):
    if shape["sg"] and (dev.subgroup_size or 0) < shape["lanes"]:
        pytest.skip(f"subgroups of {dev.subgroup_size} < {shape['lanes']} lanes on this adapter")
    check_matmul(dev, fmt, 5, 75, 1, shape["lanes"], 1, rpt=shape["rpt"], wg=shape["wg"], sg=shape["sg"])


def check_matmul(dev, fmt, blocks, N, T, lanes, tb, rpt=1, wg=64, sg=False):
    K = row_len(fmt, blocks)
    rng = np.random.default_rng(int(fmt) * 1000 + blocks * 100 + N + T)
    raw, wq = random_weights(fmt, N, K, rng)
    x = rng.standard_normal((T, K)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, K).astype(np.float32)      # the norm gain the kernel applies to x
    y0 = rng.standard_normal((T, N)).astype(np.float32)
    W, X, G = upload(dev, raw), upload(dev, x), upload(dev, g)
    eps = 1e-6
    xg = (x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + eps) * g).astype(np.float64)
    want = xg @ wq.astype(np.float64).T
    # f32 accumulation over K terms: error well below 1e-5 of the sum of |terms|; one wrong weight moves the
    # result by about 1/K of it (K <= 1536 here), so this still catches any decoding mistake
    tol = 2e-5 * (np.abs(xg) @ magnitude(fmt, raw, wq).astype(np.float64).T) + 1e-30
    for accum in (False, True):
        Y = upload(dev, y0)
        run(dev, kernels.matmul(fmt, K, N, norm=True, eps=eps, accum=accum, tokens=tb, lanes=lanes, rpt=rpt, wg=wg,
                                sg=sg),
            [W, X, Y, step_buffer(dev, T), G],
            kernels.spread(kernels.matmul_groups(N, lanes, rpt, wg)))
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


# ---------------------------------------------------------------------------------------------------------------
# a tiny llama whose tensors mix types, against the float32 numpy reference on the same file

E, F, H, KV, LAYERS = 256, 512, 4, 2, 2
# layer 0: Q/K/V share a type (one stacked projection), gate and up differ (two passes + swiglu);
# layer 1: Q/K/V differ (three projections into one buffer), gate and up share BF16 (one stacked GLU pass)
MIXED = {
    "token_embd.weight": GGMLType.Q4_K, "output.weight": GGMLType.Q6_K,
    "blk.0.attn_q.weight": GGMLType.Q4_K, "blk.0.attn_k.weight": GGMLType.Q4_K, "blk.0.attn_v.weight": GGMLType.Q4_K,
    "blk.0.attn_output.weight": GGMLType.Q6_K, "blk.0.ffn_gate.weight": GGMLType.Q5_0,
    "blk.0.ffn_up.weight": GGMLType.Q8_0, "blk.0.ffn_down.weight": GGMLType.F16,
    "blk.1.attn_q.weight": GGMLType.Q5_K, "blk.1.attn_k.weight": GGMLType.Q3_K, "blk.1.attn_v.weight": GGMLType.Q2_K,
    "blk.1.attn_output.weight": GGMLType.Q5_1, "blk.1.ffn_gate.weight": GGMLType.BF16,
    "blk.1.ffn_up.weight": GGMLType.BF16, "blk.1.ffn_down.weight": GGMLType.Q4_1,
}
# k-quants: (byte offset of d, of dmin or None, dmin/d that centres the weights: E[sc*q] / E[mn])
K_SCALES = {GGMLType.Q2_K: (80, 82, 1.5), GGMLType.Q3_K: (108, None, 0), GGMLType.Q4_K: (0, 2, 7.5),
            GGMLType.Q5_K: (0, 2, 15.5), GGMLType.Q6_K: (208, None, 0)}


def byte_symbols():
    """GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the other 68 bytes for the
    code points 256.. in byte order."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def packed_weights(qtype, n, k, std, rng):
    """Weights [n, k] of about `std` standard deviation, packed as qtype: uint8 [n, row_bytes]. The gguf package
    quantizes the legacy and float types; k-quant blocks are written directly (random quants and sub-block scales,
    d and dmin scaled to the wanted spread with a random sign per super-block): the weights are what they decode to."""
    import gguf
    gtype = gguf.GGMLQuantizationType(int(qtype))
    if qtype not in K_SCALES:
        w = (rng.standard_normal((n, k)) * std).astype(np.float32)
        return np.ascontiguousarray(gguf.quants.quantize(w, gtype)).view(np.uint8).reshape(n, -1)
    d_at, m_at, ratio = K_SCALES[qtype]
    raw = rng.integers(0, 256, size=(n * k // 256, GGML_BLOCK[qtype][1]), dtype=np.uint8)

    def set_scales(d):
        raw[:, d_at:d_at + 2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
        if m_at is not None:
            raw[:, m_at:m_at + 2] = (d * ratio).astype("<f2").view(np.uint8).reshape(-1, 2)

    set_scales(np.ones(raw.shape[0], np.float32))
    spread = quants.dequantize(raw, qtype, (n, k)).std()
    set_scales(rng.choice([-1.0, 1.0], raw.shape[0]) * std / spread)
    return raw.reshape(n, -1)


def write_tiny_llama(path, types, seed=0):
    import gguf
    rng = np.random.default_rng(seed)
    symbols = byte_symbols()
    # byte-level BPE merges, each joining two existing tokens (ranked in this order)
    merges = ["Ġ t", "h e", "Ġt he", "Ġ a", "i n", "e r", "o n", "Ġ s", "a t", "Ġ c", "r e", "e n", "Ġ w", "o r",
              "Ġ o", "e s", "a n", "i s", "Ġ b", "Ġ f", "Ġ p", "a r", "a l", "Ġ m", "Ġc at", "Ġo n", "i t", "Ġ h",
              "l e", "e d", "Ġ d", "o u", "Ġ in", "Ġ is", "Ġs at"]
    tokens = symbols + [m.replace(" ", "") for m in merges] + ["<|endoftext|>"]
    assert len(set(tokens)) == len(tokens)
    V = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(LAYERS)
    w.add_context_length(128)
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * (V - 1) + [3])
    w.add_token_merges(merges)
    w.add_bos_token_id(V - 1)
    w.add_eos_token_id(V - 1)
    D = E // H
    shapes = {"token_embd.weight": (V, E), "output.weight": (V, E)}
    for i in range(LAYERS):
        p = f"blk.{i}."
        shapes.update({p + "attn_q.weight": (E, E), p + "attn_k.weight": (KV * D, E), p + "attn_v.weight": (KV * D, E),
                       p + "attn_output.weight": (E, E), p + "ffn_gate.weight": (F, E), p + "ffn_up.weight": (F, E),
                       p + "ffn_down.weight": (E, F)})
    for name, (n, k) in shapes.items():
        if name.endswith(("attn_output.weight", "ffn_down.weight")):
            std = k ** -0.5 * 0.5
        else:
            std = 1.0 if name == "token_embd.weight" else k ** -0.5
        qtype = types[name]
        if qtype in (GGMLType.F32, GGMLType.F16) or qtype in MIXED.values() or qtype in K_SCALES:
            raw = packed_weights(qtype, n, k, std, rng)
        else:   # a type nobody decodes (the unsupported-type test): any bytes of the right size
            be, bb = GGML_BLOCK[qtype]
            raw = rng.integers(0, 256, size=(n, k // be * bb), dtype=np.uint8)
        w.add_tensor(name, raw, raw_dtype=gguf.GGMLQuantizationType(int(qtype)))
    for name in ["output_norm.weight"] + [f"blk.{i}.{n}_norm.weight" for i in range(LAYERS) for n in ("attn", "ffn")]:
        w.add_tensor(name, (1 + 0.1 * rng.standard_normal(E)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return V


@pytest.fixture(scope="module")
def mixed_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("mixed") / "mixed.gguf"
    vocab = write_tiny_llama(path, MIXED)
    return path, vocab


# A device that binds at most 24,000 bytes at once: most weight matrices of the tiny model are bigger (all but the
# small K/V projections), so they are split into row ranges of their own buffers (models/base.py pieces), the
# embedding table and the LM head included; one layer's KV cache (40 positions x 2 heads x 64 floats) still fits.
SPLIT_LIMIT = 24_000


@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
def test_mixed_types_match_reference(mixed_gguf, split, monkeypatch):
    from cera_web.engine import Engine
    from cera_web.gguf import open_gguf
    from cera_web.gpu.native import NativeDevice
    from cera_web.reference import ReferenceModel

    path, V = mixed_gguf
    g = open_gguf(path)
    assert {g.tensor(n).type for n in MIXED} == set(MIXED.values())     # the file really mixes all of them
    if split:   # the kernel shapes of real GPUs too (tiled prefill), so both matmul kernels see split weights
        monkeypatch.setenv("CERA_WEB_KERNELS", "gpu")
        monkeypatch.setenv("CERA_WEB_INT8", "0")     # the float32 tiled prefill (tests/test_gemm8.py: the int8 one)
    dev = NativeDevice.create(limits_override={"max-storage-buffer-binding-size": SPLIT_LIMIT}) if split else None
    engine = asyncio.run(Engine.load(path, device=dev, context_size=40 if split else 64))
    ref = ReferenceModel.from_gguf(path)
    pieces = engine.model.split_tensors()
    if split:
        assert set(pieces) == {n for n in MIXED if g.tensor(n).nbytes > SPLIT_LIMIT}
        assert {g.tensor(n).type for n in pieces} >= {GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.Q5_0, GGMLType.Q8_0,
                                                      GGMLType.F16, GGMLType.Q5_K, GGMLType.Q5_1, GGMLType.BF16,
                                                      GGMLType.Q4_1}
        assert all(buf.size <= SPLIT_LIMIT for parts in pieces.values() for buf, _, _ in parts)
        assert len(pieces["token_embd.weight"]) >= 2
    else:
        assert pieces == {}
    try:
        ids = engine.tokenizer.encode("the cat sat on the mat; in the end, it is the cat that wins")
        assert len(ids) > 12 and max(ids) < V
        if split:   # the prompt looks up rows of every range of the split embedding table
            assert all(any(r0 <= i < r0 + n for i in ids) for _, r0, n in pieces["token_embd.weight"])
        # logits of the last prompt token
        engine.model.prefill(ids, 0, with_head=True)
        got = np.frombuffer(asyncio.run(engine.dev.read(engine.model.logits, 0, 4 * V)), np.float32)
        want = ref.forward(ids, 0, last_only=True)[-1]
        scale = np.abs(want).max()
        err = np.abs(got - want).max()
        assert scale > 1.0 and err <= 1e-4 * scale, f"logits differ by {err:.3g} (largest logit {scale:.3g})"
        # greedy tokens: equal, and not by luck (every step's top-2 margin is far above the logit error)
        want_tokens = ref.generate_greedy(ids, 8)
        res = asyncio.run(engine.generate(ids, max_tokens=8, stop_at_eos=False))
        assert res.tokens == want_tokens
        ref.reset()
        logits = ref.forward(ids + want_tokens[:-1], 0)[len(ids) - 1:]
        top2 = np.sort(logits, axis=1)[:, -2:]
        assert (top2[:, 1] - top2[:, 0]).min() > 10 * err
    finally:
        engine.close()


def test_neighbouring_projections_of_one_type_share_a_product(tmp_path):
    """Q and K of one type with V of another (Q4_K_M files: V is Q6_K in some layers), and K and V of one type after
    a Q of another: the pair is one stacked product, the third its own (two dispatches, not three); the logits still
    match the reference model's."""
    from cera_web.engine import Engine
    from cera_web.reference import ReferenceModel

    path = tmp_path / "runs.gguf"
    V = write_tiny_llama(path, {**MIXED, "blk.0.attn_v.weight": GGMLType.Q6_K, "blk.1.attn_k.weight": GGMLType.Q2_K})
    engine = asyncio.run(Engine.load(path, context_size=64))
    try:
        m = engine.model
        assert [[len(r) for r, _ in m.runs([f"blk.{i}.attn_{n}.weight" for n in "qkv"])] for i in (0, 1)] == \
            [[2, 1], [1, 2]]
        assert {"blk.0.attn_q.weight+blk.0.attn_k.weight", "blk.1.attn_k.weight+blk.1.attn_v.weight"} <= set(m.weights)
        assert not any(key.count("+") == 2 for key in m.weights)          # no Q/K/V stack was made on the way
        ids = engine.tokenizer.encode("the cat sat on the mat; in the end, it is the cat that wins")
        m.prefill(ids, 0, with_head=True)
        got = np.frombuffer(asyncio.run(engine.dev.read(m.logits, 0, 4 * V)), np.float32)
        want = ReferenceModel.from_gguf(path).forward(ids, 0, last_only=True)[-1]
        scale = np.abs(want).max()
        assert scale > 1.0 and np.abs(got - want).max() <= 1e-4 * scale
    finally:
        engine.close()


def test_unsupported_type_fails_at_load(tmp_path):
    from cera_web.engine import Engine
    from cera_web.errors import UnsupportedModelError

    path = tmp_path / "iq2.gguf"
    write_tiny_llama(path, {**MIXED, "blk.1.ffn_down.weight": GGMLType.IQ2_XXS})
    with pytest.raises(UnsupportedModelError) as e:
        asyncio.run(Engine.load(path, context_size=64))
    assert "blk.1.ffn_down.weight" in str(e.value) and "IQ2_XXS" in str(e.value)


def test_bench_kernels_reports_every_type_and_lane_count(dev):
    from cera_web.tools.bench_kernels import main, parse_shapes, run

    types = [GGMLType.Q4_K, GGMLType.Q5_0, GGMLType.BF16]
    out = asyncio.run(run(types, [(64, 512)], [1, 32], repeats=1, target_ms=2, rotate_mib=1, device=dev))
    assert out["adapter"] == dev.name
    got = {(r["type"], r["lanes"]): r for r in out["results"]}
    assert set(got) == {(t.name, lanes) for t in types for lanes in (1, 32)}
    for (name, _), r in got.items():
        elems, nbytes = GGML_BLOCK[GGMLType[name]]
        assert r["shape"] == "64x512" and r["bytes"] == 64 * 512 // elems * nbytes
        # timings themselves depend on the (shared, noisy) machine: only their presence is checked here
        assert all(isinstance(r[k], (int, float)) for k in ("us", "gbps", "read_gbps")) and r["copies"] >= 1
    with pytest.raises(SystemExit):
        parse_shapes("4096")
    with pytest.raises(SystemExit):
        main(["--types", "IQ2_XXS"])


@pytest.mark.parametrize("fmt", NEW, ids=lambda f: f.name)
def test_matmul_tiled(dev, fmt):
    """The prefill GEMM (weights through w8, normalised inputs, SwiGLU over stacked rows) for every new type."""
    N, T, eps = 37, 40, 1e-6
    K = row_len(fmt, 2)
    rng = np.random.default_rng(int(fmt) + 7)
    raw, wq = random_weights(fmt, 2 * N, K, rng)
    x = rng.standard_normal((T, K)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, K).astype(np.float32)
    W, X, G = upload(dev, raw), upload(dev, x), upload(dev, g)
    Y = dev.create_buffer(T * N * 4)
    tile = kernels.tiled_tile(N, K, T)
    run(dev, kernels.matmul_tiled(fmt, K, N, norm=True, eps=eps, glu=True, tile=tile),
        [W, X, Y, step_buffer(dev, T), G], kernels.tiled_groups(N, T, tile))
    xn = (x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + eps) * g)
    a, b = xn @ wq[:N].astype(np.float64).T, xn @ wq[N:].astype(np.float64).T
    want = a * np.exp(-np.logaddexp(0, -a)) * b     # silu(a) * b, without overflow for large |a|
    got = read(dev, Y, T * N).reshape(T, N)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
