"""One description of a model, read once from its GGUF: ``spec = model_spec(gguf)``.

A ``ModelSpec`` holds everything the GPU model (models/transformer.py), the numpy reference (reference.py), the
memory fit check and the page's memory summary (models/memory.py) need to know about a file: the dimensions, one
``Layer`` per block (attention or short convolution, with its own head counts, RoPE base and sliding window), the RoPE
layout, norms, biases, QK norm, and every tensor the model reads with the shape the metadata implies.

Each architecture is one small function ``gguf -> ModelSpec`` in ``ARCHITECTURES``. Adding a llama-family
architecture is a function here setting the fields that differ (plus, at most, a new block in
models/transformer.py and reference.py for a computation no field describes).

The metadata is checked before anything is sized from it: every count is a positive integer below 2^20, the block
count does not exceed the layers the file has tensors for, and every tensor the model needs is present with the
shape the counts imply (``check_tensors``). A damaged or hostile header therefore ends in an UnsupportedModelError
naming the key or tensor, never in a huge allocation.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..errors import InputError, UnsupportedModelError

MAX_SIZE = 1 << 20      # the largest count (layers, widths, heads) a metadata value may give
KV_WIDTH = {"f32": 4, "f16": 2}     # bytes an element of the KV cache takes, by Engine.load's kv_cache


def check_kv_cache(kv_cache: str):
    if kv_cache not in KV_WIDTH:
        raise InputError(f"kv_cache must be 'f32' or 'f16', got {kv_cache!r}")


@dataclass(frozen=True)
class Layer:
    """One block: ``x = x + post_attn_norm(op(attn_norm(x)))``, ``x = x + post_ffn_norm(ffn(ffn_norm(x)))``."""
    kind: str                           # "attention" | "conv" (LFM2's gated short convolution)
    heads: int = 0                      # query heads (attention layers)
    kv_heads: int = 0                   # key/value heads (attention layers)
    rope_theta: float = 10000.0         # this layer's RoPE base (Gemma 3: 10k local, 1M global)
    sliding_window: int | None = None   # attend to the last N positions only; None: every earlier position
    post_norms: bool = False            # Gemma: norms on the attention and FFN outputs before the residual adds

    @property
    def attention(self) -> bool:
        return self.kind == "attention"


@dataclass(frozen=True)
class Tensor:
    """A tensor the model reads: ``shape`` in GGUF order (ne0 first: a weight of n rows of k values is (k, n)),
    ``why`` names the metadata the shape comes from, ``layer``/``kind`` place it for error messages; ``packed``: a
    weight uploaded as it is stored (matrices), else read into float32 at load (norm gains, biases, conv taps)."""
    name: str
    shape: tuple
    why: str
    layer: int | None = None
    kind: str = ""
    packed: bool = False


@dataclass
class ModelSpec:
    arch: str
    n_layers: int
    hidden: int                         # E, the residual stream width
    heads: int                          # query heads of the attention layers (the same in every one)
    kv_heads: int                       # KV heads of the attention layers (the same in every one)
    head_dim: int
    ffn: int
    vocab: int
    eps: float                          # RMSNorm epsilon
    context_train: int                  # the context the model was trained for (metadata context_length)
    layers: list[Layer]
    rope_neox: bool = False             # RoPE pairs (x[i], x[i + D/2]) (True) or (x[2i], x[2i+1]) (llama's GGUF order)
    rope_scale: float = 1.0             # linear RoPE scaling: positions are divided by this
    rope_freqs: str | None = None       # a tensor of per-frequency divisors (Llama 3), or None
    qkv_bias: bool = False              # biases on the Q, K, V projections (Qwen2)
    qk_norm: bool = False               # RMSNorm over each head of Q and K before RoPE (Qwen3, LFM2, Gemma 3)
    activation: str = "silu"            # the gated FFN's activation: "silu" (SwiGLU) | "gelu_tanh" (GeGLU)
    embed_scale: float = 1.0            # embeddings are multiplied by this (Gemma: sqrt(hidden))
    query_scale: float = 0.0            # attention scores scale; 0: head_dim ** -0.5 (set in __post_init__)
    logit_softcap: float | None = None  # logits = c * tanh(logits / c) when set
    l_cache: int = 0                    # short convolution length (conv layers)
    final_norm: str = "output_norm.weight"
    lm_head: str = "token_embd.weight"  # output.weight when the file has one (else tied to the embeddings)
    tensors: dict = field(default_factory=dict)   # name -> Tensor, every tensor the model reads, in check order

    def __post_init__(self):
        if not self.query_scale:
            self.query_scale = 1.0 / math.sqrt(self.head_dim)

    def conv_layers(self) -> list[int]:
        return [i for i, layer in enumerate(self.layers) if layer.kind == "conv"]

    @property
    def rewindable(self) -> bool:
        """Whether a pass may restart at any cached position: no layer keeps a running state (conv)."""
        return not self.conv_layers()

    def kv_bytes(self, context_size: int, kv_cache: str = "f32") -> tuple[int, int]:
        """(bytes of the largest K or V cache buffer, bytes of all of them) for ``context_size`` tokens: float32 (or
        float16: kv_cache "f16"), one [context, kv_heads * head_dim] buffer each for K and V per attention layer."""
        sizes = [KV_WIDTH[kv_cache] * context_size * layer.kv_heads * self.head_dim for layer in self.layers if layer.attention]
        return max(sizes, default=0), 2 * sum(sizes)


# -- reading metadata ------------------------------------------------------------------------------------------------

def count(g, key: str, default=None, *, per_layer: int = 0):
    """Metadata ``{arch}.{key}`` as a count: a positive integer below 2^20 (per_layer: n, a list of n counts or one
    count for every layer; 0 is allowed in a list, LFM2's mark of a convolution layer)."""
    v = g.arch_get(key) if default is None else g.arch_get(key, default)
    if per_layer:
        if isinstance(v, list):
            if len(v) != per_layer:
                raise UnsupportedModelError(
                    f"{g.architecture}.{key} lists {len(v)} values but the model has {per_layer} layers (block_count)")
            for x in v:
                _check_count(g, key, x, zero_ok=True)
            return [int(x) for x in v]
        return [_check_count(g, key, v)] * per_layer
    if isinstance(v, list):
        raise UnsupportedModelError(f"{g.architecture}.{key} is a per-layer list, which cera_web supports only "
                                    f"for head counts")
    return _check_count(g, key, v)


def _check_count(g, key, v, zero_ok=False) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (v == 0 and not zero_ok):
        raise UnsupportedModelError(f"metadata {g.architecture}.{key} = {v!r} is not a positive integer: the file is "
                                    f"damaged or unusual")
    if v >= MAX_SIZE:
        raise UnsupportedModelError(f"metadata {g.architecture}.{key} = {v!r} is not a valid size (a positive integer "
                                    f"below 2^20): the file is damaged or unusual")
    return int(v)


def number(g, key: str, default: float) -> float:
    """Metadata ``{arch}.{key}`` as a positive finite float."""
    v = g.arch_get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
        raise UnsupportedModelError(f"metadata {g.architecture}.{key} = {v!r} is not a positive finite number: the "
                                    f"file is damaged")
    return float(v)


def block_count(g) -> int:
    """block_count, checked against the layers the file has tensors for before anything is sized from it (a
    header claiming 2^32 - 1 layers over tensors for 2 fails here, not in an allocation)."""
    n = g.arch_get("block_count")
    present = 1 + max((int(m.group(1)) for m in map(_LAYER.match, g.tensors) if m), default=-1)
    if isinstance(n, int) and not isinstance(n, bool) and n > present:
        raise UnsupportedModelError(
            f"metadata {g.architecture}.block_count = {n}, but the model file has no tensor "
            f"'blk.{present}.attn_norm.weight' (it has tensors for {present} layers): the file is damaged or "
            f"truncated; re-convert or re-download it")
    return count(g, "block_count")


_LAYER = re.compile(r"blk\.(\d+)\.")


def context_length(g) -> int:
    """The trained context (used to bound the reference model's positions, never to size a buffer)."""
    v = g.arch_get("context_length", 2048)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise UnsupportedModelError(f"metadata {g.architecture}.context_length = {v!r} is not a positive integer")
    return v


def _rope(g, head_dim: int) -> float:
    """RoPE checks shared by every architecture; returns the linear scaling factor (1: none)."""
    rope_dims = g.arch_get("rope.dimension_count", head_dim)
    if rope_dims != head_dim:
        raise UnsupportedModelError(f"partial rotary embeddings ({rope_dims} of {head_dim} dims) are not supported")
    scaling = g.arch_get("rope.scaling.type", "none")
    if scaling == "linear":
        return number(g, "rope.scaling.factor", 1.0)
    if scaling not in ("none", None):
        raise UnsupportedModelError(f"rope scaling {scaling!r} is not supported")
    return 1.0


def _heads(g, layers: list[int], heads: list[int], kv: list[int]) -> tuple[int, int]:
    """The one (query heads, KV heads) pair of the attention layers ``layers``."""
    if len({heads[i] for i in layers}) > 1 or len({kv[i] for i in layers}) > 1:
        raise UnsupportedModelError(
            f"the attention layers of this {g.architecture} model differ in head counts (query heads {heads}, KV "
            f"heads {kv} per layer); cera_web needs the same counts in every attention layer")
    if not layers:
        return max(heads), 1
    h, k = heads[layers[0]], kv[layers[0]]
    if h % k:
        raise UnsupportedModelError(f"layer {layers[0]}: {h} query heads cannot be grouped over {k} KV heads")
    return h, k


def _embedding(g) -> tuple[int, int]:
    """(hidden, vocab) from the token embedding table's shape, checked against embedding_length."""
    info = g.tensor("token_embd.weight")
    if len(info.shape) != 2:
        raise UnsupportedModelError(f"tensor 'token_embd.weight' should be 2-D, has shape {info.shape}")
    return count(g, "embedding_length"), int(info.shape[1])


# -- the architectures -------------------------------------------------------------------------------------------

def _decoder(g, *, neox: bool, qkv_bias: bool = False, qk_norm: bool = False) -> ModelSpec:
    """A llama-style decoder (every layer attention + gated FFN): llama, qwen2, qwen3."""
    if g.arch_get("expert_count", 0):
        raise UnsupportedModelError(f"mixture-of-experts {g.architecture} models are not supported")
    n = block_count(g)
    hidden, vocab = _embedding(g)
    heads = count(g, "attention.head_count", per_layer=n)
    kv = count(g, "attention.head_count_kv", heads[0], per_layer=n)
    if min(heads) < 1 or min(kv) < 1:
        raise UnsupportedModelError(f"metadata {g.architecture}.attention.head_count(_kv) has a zero: every layer "
                                    f"of a {g.architecture} model is an attention layer")
    h, k = _heads(g, list(range(n)), heads, kv)
    head_dim = count(g, "attention.key_length", hidden // h)
    if count(g, "attention.value_length", head_dim) != head_dim:
        raise UnsupportedModelError("attention.value_length differs from attention.key_length; not supported")
    theta = number(g, "rope.freq_base", 10000.0)
    spec = ModelSpec(
        arch=g.architecture, n_layers=n, hidden=hidden, heads=h, kv_heads=k, head_dim=head_dim,
        ffn=count(g, "feed_forward_length"), vocab=vocab, eps=number(g, "attention.layer_norm_rms_epsilon", 1e-5),
        context_train=context_length(g),
        layers=[Layer("attention", h, k, rope_theta=theta) for _ in range(n)],
        rope_neox=neox, rope_scale=_rope(g, head_dim), qkv_bias=qkv_bias, qk_norm=qk_norm,
        rope_freqs="rope_freqs.weight" if "rope_freqs.weight" in g.tensors else None,
        lm_head="output.weight" if "output.weight" in g.tensors else "token_embd.weight")
    spec.tensors = expected_tensors(spec)
    return spec


def llama(g) -> ModelSpec:
    """Llama, SmolLM2, Mistral-style GQA. llama.cpp permutes the Q/K rows of these files so that RoPE rotates
    interleaved pairs."""
    return _decoder(g, neox=False)


def qwen2(g) -> ModelSpec:
    """Qwen2: Q/K/V biases; Q/K rows in HF order (NEOX RoPE)."""
    return _decoder(g, neox=True, qkv_bias=True)


def qwen3(g) -> ModelSpec:
    """Qwen3: per-head Q/K RMSNorm before RoPE, head size from attention.key_length; NEOX RoPE."""
    return _decoder(g, neox=True, qk_norm=True)


def lfm2(g) -> ModelSpec:
    """LFM2: short-convolution layers and Qwen3-style attention layers (head_count_kv is a per-layer list, 0 marking
    a convolution layer); final norm token_embd_norm (HF "embedding_norm", applied at the end)."""
    from ..kernels import MAX_L_CACHE
    n = block_count(g)
    hidden, vocab = _embedding(g)
    heads = count(g, "attention.head_count", per_layer=n)
    kv = count(g, "attention.head_count_kv", per_layer=n)
    att = [i for i in range(n) if kv[i] > 0]
    h, k = _heads(g, att, heads, kv)
    head_dim = count(g, "attention.key_length", hidden // h)
    if count(g, "attention.value_length", head_dim) != head_dim:
        raise UnsupportedModelError("attention.value_length differs from attention.key_length; not supported")
    _rope(g, head_dim)
    if g.arch_get("rope.scaling.type", "none") not in ("none", None):
        raise UnsupportedModelError(f"rope scaling {g.arch_get('rope.scaling.type')!r} is not supported")
    theta = number(g, "rope.freq_base", 1000000.0)
    conv = [i for i in range(n) if kv[i] == 0]
    l_cache = g.arch_get("shortconv.l_cache", 0) if conv else 0
    if conv and (not isinstance(l_cache, int) or not 2 <= l_cache <= MAX_L_CACHE):
        raise UnsupportedModelError(
            f"layer {conv[0]} (short convolution, tensor 'blk.{conv[0]}.shortconv.conv.weight'): {g.architecture}."
            f"shortconv.l_cache = {l_cache} is not supported; the convolution kernel handles lengths 2 to "
            f"{MAX_L_CACHE}")
    final = "token_embd_norm.weight"
    if final not in g.tensors and "output_norm.weight" in g.tensors:
        final = "output_norm.weight"          # tolerate converters that name the final norm so
    spec = ModelSpec(
        arch=g.architecture, n_layers=n, hidden=hidden, heads=h, kv_heads=k, head_dim=head_dim,
        ffn=count(g, "feed_forward_length"), vocab=vocab, eps=number(g, "attention.layer_norm_rms_epsilon", 1e-5),
        context_train=context_length(g),
        layers=[Layer("attention", h, k, rope_theta=theta) if kv[i] else Layer("conv") for i in range(n)],
        rope_neox=True, qk_norm=True, l_cache=l_cache, final_norm=final,
        lm_head="output.weight" if "output.weight" in g.tensors else "token_embd.weight")
    spec.tensors = expected_tensors(spec)
    return spec


GEMMA3_LOCAL_THETA = 10000.0   # RoPE base of Gemma 3's sliding-window layers (not in the GGUF; llama.cpp fixes it too)
GEMMA3_PATTERN = 6             # every sixth layer is global (not in the GGUF unless attention.sliding_window_pattern)


def gemma3(g) -> ModelSpec:
    """Gemma 3: sliding-window (local) attention layers with a global one every sixth (their own RoPE bases), four
    norms a layer (the attention and FFN outputs are normalised before the residual adds), per-head Q/K norms, GeGLU
    with tanh GELU, embeddings scaled by sqrt(hidden), tied LM head, NEOX RoPE. The GGUF stores each norm gain as
    1 + w (Gemma's RMSNorm multiplies by 1 + w), so the gains are used as stored. Scores are scaled by
    head_dim ** -0.5 (query_pre_attn_scalar = head_dim: what llama.cpp assumes for every size but 27B)."""
    spec = _decoder(g, neox=True, qk_norm=True)
    if spec.rope_scale != 1.0:
        raise UnsupportedModelError("Gemma 3 with linear RoPE scaling (the 4B and larger models scale their global "
                                    "layers only) is not supported yet")
    window = count(g, "attention.sliding_window")
    pattern = g.arch_get("attention.sliding_window_pattern", GEMMA3_PATTERN)
    if isinstance(pattern, list):
        local = [bool(v) for v in pattern]
        if len(local) != spec.n_layers:
            raise UnsupportedModelError(f"gemma3.attention.sliding_window_pattern lists {len(local)} layers, the "
                                        f"model has {spec.n_layers}")
    else:
        period = _check_count(g, "attention.sliding_window_pattern", pattern)
        local = [(i + 1) % period != 0 for i in range(spec.n_layers)]
    global_theta = spec.layers[0].rope_theta
    spec.layers = [Layer("attention", la.heads, la.kv_heads, GEMMA3_LOCAL_THETA if loc else global_theta,
                         window if loc else None, post_norms=True) for la, loc in zip(spec.layers, local)]
    spec.activation = "gelu_tanh"
    spec.embed_scale = math.sqrt(spec.hidden)
    spec.tensors = expected_tensors(spec)
    return spec


def not_implemented(s: ModelSpec) -> list[str]:
    """The fields of ``s`` set to something the blocks do not compute yet (Gemma 3's): the models refuse such a
    spec rather than run it wrongly. Remove a name here once both the GPU and the reference blocks handle it."""
    return [name for name, unset in (
        ("activation", s.activation in ("silu", "gelu_tanh")),
        ("logit_softcap", s.logit_softcap is None)) if not unset]


ARCHITECTURES = {"llama": llama, "qwen2": qwen2, "qwen3": qwen3, "lfm2": lfm2, "gemma3": gemma3}


def check_architecture(arch: str):
    if arch not in ARCHITECTURES:
        raise UnsupportedModelError(
            f"architecture {arch!r} is not supported (supported: {', '.join(sorted(ARCHITECTURES))})")


def model_spec(g) -> ModelSpec:
    """The spec of parsed GGUF ``g``, with every tensor it needs checked (present, and the shape the metadata
    implies). Raises UnsupportedModelError naming what is wrong."""
    check_architecture(g.architecture)
    spec = ARCHITECTURES[g.architecture](g)
    check_tensors(spec, g)
    return spec


# -- the tensors -------------------------------------------------------------------------------------------------

def expected_tensors(s: ModelSpec) -> dict:
    """name -> Tensor of everything the model reads, in the order they are checked (layer by layer)."""
    E, F, D = s.hidden, s.ffn, s.head_dim
    out: dict = {}

    def add(name, shape, why, layer=None, kind="", packed=None):
        out[name] = Tensor(name, tuple(shape), why, layer, kind, len(shape) > 1 if packed is None else packed)

    vocab_why = f"vocabulary {s.vocab}, hidden {E}"
    add("token_embd.weight", (E, s.vocab), vocab_why)
    if s.lm_head != "token_embd.weight":
        add(s.lm_head, (E, s.vocab), vocab_why)
    heads_why = f"{s.heads} query heads, {s.kv_heads} KV heads of size {D}, hidden {E}"
    for i, layer in enumerate(s.layers):
        p, kind = f"blk.{i}.", ("attention" if layer.attention else "short convolution")

        def at(n, shape, why, packed=None):
            add(p + n, shape, why, i, kind, packed)

        at("attn_norm.weight", (E,), f"hidden {E}")
        if layer.attention:
            q, kv = layer.heads * D, layer.kv_heads * D
            at("attn_q.weight", (E, q), heads_why)
            at("attn_k.weight", (E, kv), heads_why)
            at("attn_v.weight", (E, kv), heads_why)
            at("attn_output.weight", (q, E), heads_why)
            if s.qkv_bias:
                for n, rows in (("q", q), ("k", kv), ("v", kv)):
                    at(f"attn_{n}.bias", (rows,), "from the head counts and head size in the metadata")
            if s.qk_norm:
                at("attn_q_norm.weight", (D,), f"head size {D}")
                at("attn_k_norm.weight", (D,), f"head size {D}")
        else:
            at("shortconv.in_proj.weight", (E, 3 * E), f"hidden size {E}")
            at("shortconv.conv.weight", (s.l_cache, E),
               f"from {s.arch}.shortconv.l_cache = {s.l_cache} and the hidden size", packed=False)
            at("shortconv.out_proj.weight", (E, E), f"hidden size {E}")
        if layer.post_norms:
            at("post_attention_norm.weight", (E,), f"hidden {E}")
        at("ffn_norm.weight", (E,), f"hidden {E}")
        ffn_why = f"{heads_why}, feed-forward {F}" if layer.attention else f"feed-forward {F}, hidden {E}"
        at("ffn_gate.weight", (E, F), ffn_why)
        at("ffn_up.weight", (E, F), ffn_why)
        at("ffn_down.weight", (F, E), ffn_why)
        if layer.post_norms:
            at("post_ffw_norm.weight", (E,), f"hidden {E}")
    add(s.final_norm, (E,), f"hidden {E}")
    if s.rope_freqs:
        add(s.rope_freqs, (D // 2,), f"head size {D}")
    return out


def check_tensors(s: ModelSpec, g):
    """Every tensor of ``s.tensors`` is in ``g`` with its expected shape; UnsupportedModelError naming the first that
    is not (a file whose header disagrees with its tensors would otherwise run and produce garbage)."""
    for t in s.tensors.values():
        info = g.tensors.get(t.name)
        where = "" if t.layer is None else f"layer {t.layer}: "
        if info is None:
            if t.layer is not None and len(t.shape) > 1:
                where = f"layer {t.layer} ({t.kind}): "
            raise UnsupportedModelError(
                f"{where}the model file has no tensor {t.name!r}, which {'a ' + t.kind + ' layer' if t.kind else 'the model'}"
                f" needs; the file does not match the {s.arch} layout (re-convert it)")
        got = tuple(info.shape)
        if got == t.shape:
            continue
        if len(t.shape) == 1:
            raise UnsupportedModelError(
                f"{where}tensor {t.name!r} has {info.n_elements} values but the metadata implies {t.shape[0]} "
                f"({t.why}): the file's metadata and weights disagree; re-convert the model")
        if t.name.endswith("shortconv.conv.weight"):
            raise UnsupportedModelError(
                f"layer {t.layer} ({t.kind}): tensor {t.name!r} has shape {got}, expected {t.shape} ({t.why})")
        if len(got) != 2:
            raise UnsupportedModelError(f"{where}tensor {t.name!r} should be 2-D, has shape {got}")
        raise UnsupportedModelError(
            f"{where}tensor {t.name!r} is {got[1]} x {got[0]} (rows x columns) but the metadata implies "
            f"{t.shape[1]} x {t.shape[0]} ({t.why}): the file's metadata and weights disagree; re-convert the model")
