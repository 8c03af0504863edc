"""A float32 numpy forward pass: the CPU reference the GPU engine is checked against, and a CPU fallback.

Weights are dequantized once at load (``cera_web.quants``) and kept as float32 arrays in numpy order
``(out_features, in_features)``; activations stay float32 throughout. Nothing here needs more than numpy, so it
runs in Pyodide too (slowly, and only for small models: a 135M-parameter model takes about 0.55 GB as float32).

Layout of the module, mlx-lm style: a dataclass of model arguments read from GGUF metadata, then one small class
per block (Attention, MLP, TransformerBlock, the model), shared helpers above them. Another architecture (qwen2,
qwen3, lfm2) is added as its own arguments class + model class and one line in ``ARCHITECTURES``.

Shapes: T = tokens in this call, S = cached positions (past + this call), H = query heads, KV = key/value heads,
D = head dimension, E = embedding width, F = feed-forward width, V = vocabulary.

RoPE and the GGUF layout: for ``llama`` the llama.cpp converter permutes the rows of ``attn_q``/``attn_k`` so that
the two halves HF rotates together (i, i + D/2) become adjacent rows (2i, 2i + 1). RoPE is therefore applied to
interleaved pairs here ("normal" mode in ggml), which gives exactly the same logits as HF's rotate-half on the
unpermuted weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

from cera_web.errors import ContextOverflowError, InputError, UnsupportedModelError
from cera_web.gguf import GGUFFile, open_gguf, path_reader, tensor_bytes
from cera_web.quants import dequantize_tensor, supported_types

Loader = Callable[[str], np.ndarray]   # tensor name -> float32 array in numpy order


# ---------------------------------------------------------------------------------------------------------------
# shared pieces

def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x [T, E] scaled to unit root-mean-square per row, times weight [E]."""
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return (x / np.sqrt(ms + np.float32(eps))) * weight


def silu(x: np.ndarray) -> np.ndarray:
    # x * sigmoid(x), with sigmoid written through tanh so large |x| cannot overflow exp
    return x * (np.float32(0.5) + np.float32(0.5) * np.tanh(np.float32(0.5) * x))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def rope_inv_freq(rope_dim: int, theta: float) -> np.ndarray:
    """[rope_dim/2] angular speeds: theta ** (-2i / rope_dim)."""
    return (1.0 / theta ** (np.arange(0, rope_dim, 2, dtype=np.float64) / rope_dim)).astype(np.float32)


def rope_interleaved(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """Rotate pairs (x[2i], x[2i+1]) of x [T, heads, D] by positions[t] * inv_freq[i] (the first 2*len(inv_freq)
    dimensions; any rest passes through unchanged)."""
    n = 2 * inv_freq.shape[0]
    angles = positions.astype(np.float32)[:, None] * inv_freq[None, :]    # [T, n/2]
    cos = np.cos(angles)[:, None, :]                                          # [T, 1, n/2]
    sin = np.sin(angles)[:, None, :]
    even, odd = x[..., 0:n:2], x[..., 1:n:2]                                  # [T, heads, n/2]
    out = x.copy()
    out[..., 0:n:2] = even * cos - odd * sin
    out[..., 1:n:2] = even * sin + odd * cos
    return out


class KVCache:
    """Keys and values of one attention layer for the positions seen so far; grows by doubling."""

    def __init__(self, n_kv_heads: int, head_dim: int, capacity: int = 64):
        self.k = np.zeros((capacity, n_kv_heads, head_dim), np.float32)
        self.v = np.zeros_like(self.k)
        self.length = 0

    def update(self, start: int, k: np.ndarray, v: np.ndarray):
        """Write k, v [T, KV, D] at positions start.. (dropping anything cached after start), return all keys
        and values [S, KV, D] up to the end of this write."""
        end = start + k.shape[0]
        if end > self.k.shape[0]:
            cap = max(end, 2 * self.k.shape[0])
            for name in ("k", "v"):
                grown = np.zeros((cap,) + self.k.shape[1:], np.float32)
                grown[:self.length] = getattr(self, name)[:self.length]
                setattr(self, name, grown)
        self.k[start:end] = k
        self.v[start:end] = v
        self.length = end
        return self.k[:end], self.v[:end]


def _linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x [T, in] @ w [out, in]^T -> [T, out]."""
    return x @ w.T


# ---------------------------------------------------------------------------------------------------------------
# llama

@dataclass
class LlamaArgs:
    n_layers: int
    dim: int               # E
    n_heads: int           # H
    n_kv_heads: int        # KV
    head_dim: int          # D
    ffn_dim: int           # F
    vocab_size: int        # V
    context_length: int
    rope_theta: float
    rope_dim: int
    norm_eps: float

    @classmethod
    def from_gguf(cls, g: GGUFFile) -> "LlamaArgs":
        scaling = g.arch_get("rope.scaling.type", "none")
        if scaling not in ("none", None) and g.arch_get("rope.scaling.factor", 1.0) not in (0.0, 1.0):
            raise UnsupportedModelError(
                f"RoPE scaling {scaling!r} is not supported by the reference model; use a model without it")
        if "rope_freqs.weight" in g.tensors:
            raise UnsupportedModelError(
                "the model has per-frequency RoPE factors (rope_freqs.weight, Llama 3.1-style scaling), which the "
                "reference model does not support; use a model without RoPE scaling")
        if g.arch_get("expert_count", 0):
            raise UnsupportedModelError("mixture-of-experts llama models are not supported")
        dim = int(g.arch_get("embedding_length"))
        n_heads = int(g.arch_get("attention.head_count"))
        head_dim = int(g.arch_get("attention.key_length", dim // n_heads))
        return cls(
            n_layers=int(g.arch_get("block_count")),
            dim=dim,
            n_heads=n_heads,
            n_kv_heads=int(g.arch_get("attention.head_count_kv", n_heads)),
            head_dim=head_dim,
            ffn_dim=int(g.arch_get("feed_forward_length")),
            vocab_size=int(g.tensor("token_embd.weight").shape[1]),
            context_length=int(g.arch_get("context_length")),
            rope_theta=float(g.arch_get("rope.freq_base", 10000.0)),
            rope_dim=int(g.arch_get("rope.dimension_count", head_dim)),
            norm_eps=float(g.arch_get("attention.layer_norm_rms_epsilon")),
        )


class LlamaAttention:
    """Grouped-query attention: H query heads share KV key/value heads (H / KV queries per KV head)."""

    def __init__(self, args: LlamaArgs, wq, wk, wv, wo):
        self.args = args
        self.wq, self.wk, self.wv, self.wo = wq, wk, wv, wo       # [H*D, E], [KV*D, E], [KV*D, E], [E, H*D]
        self.inv_freq = rope_inv_freq(args.rope_dim, args.rope_theta)

    def __call__(self, x: np.ndarray, start: int, cache: KVCache) -> np.ndarray:
        a = self.args
        T, H, KV, D = x.shape[0], a.n_heads, a.n_kv_heads, a.head_dim
        positions = np.arange(start, start + T)
        q = _linear(x, self.wq).reshape(T, H, D)
        k = _linear(x, self.wk).reshape(T, KV, D)
        v = _linear(x, self.wv).reshape(T, KV, D)
        q = rope_interleaved(q, positions, self.inv_freq)
        k = rope_interleaved(k, positions, self.inv_freq)
        keys, values = cache.update(start, k, v)                         # [S, KV, D]
        S = keys.shape[0]

        # query head h = kv * group + g reads KV head kv
        group = H // KV
        qg = q.reshape(T, KV, group, D).transpose(1, 2, 0, 3)             # [KV, group, T, D]
        kt = keys.transpose(1, 2, 0)[:, None]                             # [KV, 1, D, S]
        scores = (qg @ kt) * np.float32(1.0 / np.sqrt(D))                 # [KV, group, T, S]
        future = np.arange(S)[None, :] > positions[:, None]                # [T, S] causal mask
        scores = np.where(future, np.float32(-np.inf), scores)
        out = softmax(scores) @ values.transpose(1, 0, 2)[:, None]        # [KV, group, T, D]
        out = out.transpose(2, 0, 1, 3).reshape(T, H * D)
        return _linear(out, self.wo)


class LlamaMLP:
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, gate, up, down):
        self.gate, self.up, self.down = gate, up, down                    # [F, E], [F, E], [E, F]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return _linear(silu(_linear(x, self.gate)) * _linear(x, self.up), self.down)


class LlamaBlock:
    """Pre-norm transformer block: x + attn(norm(x)), then + mlp(norm(.))."""

    def __init__(self, args: LlamaArgs, load: Loader, i: int):
        p = f"blk.{i}."
        self.eps = args.norm_eps
        self.attn_norm = load(p + "attn_norm.weight")
        self.attn = LlamaAttention(args, load(p + "attn_q.weight"), load(p + "attn_k.weight"),
                                   load(p + "attn_v.weight"), load(p + "attn_output.weight"))
        self.ffn_norm = load(p + "ffn_norm.weight")
        self.mlp = LlamaMLP(load(p + "ffn_gate.weight"), load(p + "ffn_up.weight"), load(p + "ffn_down.weight"))

    def __call__(self, x: np.ndarray, start: int, cache: KVCache) -> np.ndarray:
        h = x + self.attn(rms_norm(x, self.attn_norm, self.eps), start, cache)
        return h + self.mlp(rms_norm(h, self.ffn_norm, self.eps))


class LlamaModel:
    """token ids -> logits for the llama architecture (also SmolLM2, TinyLlama, Llama 2/3 without RoPE scaling)."""

    def __init__(self, args: LlamaArgs, load: Loader, has_output: bool):
        self.args = args
        self.tok_embeddings = load("token_embd.weight")                    # [V, E]
        self.layers = [LlamaBlock(args, load, i) for i in range(args.n_layers)]
        self.norm = load("output_norm.weight")
        # tied embeddings: files without output.weight reuse the embedding matrix as the output projection
        self.output = load("output.weight") if has_output else self.tok_embeddings   # [V, E]

    @classmethod
    def from_gguf(cls, g: GGUFFile, load: Loader) -> "LlamaModel":
        return cls(LlamaArgs.from_gguf(g), load, "output.weight" in g.tensors)

    def new_cache(self) -> list[KVCache]:
        return [KVCache(self.args.n_kv_heads, self.args.head_dim) for _ in self.layers]

    def __call__(self, ids: np.ndarray, start: int, cache: list[KVCache], last_only: bool = False) -> np.ndarray:
        x = self.tok_embeddings[ids]                                       # [T, E]
        for layer, layer_cache in zip(self.layers, cache):
            x = layer(x, start, layer_cache)
        if last_only:
            x = x[-1:]
        return _linear(rms_norm(x, self.norm, self.args.norm_eps), self.output)   # [T, V]


# architecture name in GGUF metadata -> model class (with from_gguf(g, load), new_cache(), __call__)
ARCHITECTURES = {
    "llama": LlamaModel,
}


# ---------------------------------------------------------------------------------------------------------------
# the engine-facing wrapper

class ReferenceModel:
    """A model plus its KV cache. ``forward`` continues the cached sequence (or rewinds it to ``start_pos``)."""

    def __init__(self, model, architecture: str):
        self.model = model
        self.architecture = architecture
        self.args = model.args
        self.vocab_size = model.args.vocab_size
        self.context_length = model.args.context_length
        self.cache = model.new_cache()
        self.position = 0                     # number of tokens in the cache

    @classmethod
    def from_gguf(cls, source, read=None) -> "ReferenceModel":
        """Load from a path, or from a parsed ``GGUFFile`` plus ``read(offset, n) -> bytes`` (a callable, or an
        object with a ``read`` method such as ``cera_web.source.FileSource``)."""
        if isinstance(source, GGUFFile):
            g = source
            if read is None:
                raise InputError("ReferenceModel.from_gguf(GGUFFile, read) needs a read(offset, n) function "
                                 "(or a source object) to fetch tensor data")
        else:
            g = open_gguf(source)
            read = read or path_reader(os.fspath(source))
        if not callable(read):
            read = read.read
        arch = g.architecture
        if arch not in ARCHITECTURES:
            raise UnsupportedModelError(
                f"architecture {arch!r} is not supported by the reference model "
                f"(supported: {', '.join(sorted(ARCHITECTURES))})")
        g.check_tensor_types(supported_types())

        def load(name: str) -> np.ndarray:
            info = g.tensor(name)
            return dequantize_tensor(info, tensor_bytes(read, info))

        return cls(ARCHITECTURES[arch].from_gguf(g, load), arch)

    def reset(self):
        """Forget the cached sequence."""
        self.position = 0
        for c in self.cache:
            c.length = 0

    def forward(self, token_ids, start_pos: int | None = None, *, last_only: bool = False) -> np.ndarray:
        """Run ``token_ids`` at positions ``start_pos..``; returns float32 logits [len(token_ids), V] (or [1, V]
        with ``last_only``). ``start_pos`` defaults to the end of the cached sequence; a smaller value rewinds it."""
        ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
        start = self.position if start_pos is None else int(start_pos)
        if ids.size == 0:
            raise InputError("forward() needs at least one token id")
        if ids.min() < 0 or ids.max() >= self.vocab_size:
            raise InputError(f"token ids must lie in [0, {self.vocab_size}); got {ids.min()}..{ids.max()}")
        if not 0 <= start <= self.position:
            raise InputError(f"start_pos {start} is past the cached sequence of {self.position} tokens; "
                             f"continue from {self.position} or rewind to an earlier position")
        if start + ids.size > self.context_length:
            raise ContextOverflowError(
                f"{start + ids.size} tokens do not fit in the model's context of {self.context_length}; "
                "shorten the prompt or start a new conversation")
        logits = self.model(ids, start, self.cache, last_only=last_only)
        self.position = start + ids.size
        return logits

    def generate_greedy(self, prompt_ids, n: int) -> list[int]:
        """Start a fresh sequence from ``prompt_ids`` and return the ``n`` most likely next tokens, one at a time."""
        self.reset()
        out: list[int] = []
        logits = self.forward(prompt_ids, 0, last_only=True)
        for i in range(n):
            out.append(int(np.argmax(logits[-1])))
            if i + 1 < n:
                logits = self.forward([out[-1]], last_only=True)
        return out


# ---------------------------------------------------------------------------------------------------------------
# qwen2, qwen3, lfm2 (the GPU versions are cera_web/models/qwen.py and lfm2.py)
#
# These GGUFs keep HF's row order for Q and K (llama.cpp does not permute them), so RoPE rotates the halves
# (x[i], x[i + D/2]) together ("NEOX" mode). Qwen2 adds biases to Q, K and V; Qwen3 and LFM2's attention layers
# RMS-normalise every head of Q and K (one [D] gain each) before RoPE. LFM2 mixes those attention layers with
# short-convolution layers (see Lfm2ShortConv).

def rope_neox(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """Rotate pairs (x[i], x[i + n/2]) of x [T, heads, D] by positions[t] * inv_freq[i], n = 2 * len(inv_freq)
    (the first n dimensions; any rest passes through unchanged)."""
    n = 2 * inv_freq.shape[0]
    angles = positions.astype(np.float32)[:, None] * inv_freq[None, :]    # [T, n/2]
    cos = np.cos(angles)[:, None, :]
    sin = np.sin(angles)[:, None, :]
    lo, hi = x[..., :n // 2], x[..., n // 2:n]
    out = x.copy()
    out[..., :n // 2] = lo * cos - hi * sin
    out[..., n // 2:n] = lo * sin + hi * cos
    return out


def _causal_gqa(q: np.ndarray, keys: np.ndarray, values: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """q [T, H, D] against keys/values [S, KV, D] (query head h reads KV head h // (H / KV)), causal; -> [T, H*D]."""
    T, H, D = q.shape
    KV = keys.shape[1]
    qg = q.reshape(T, KV, H // KV, D).transpose(1, 2, 0, 3)               # [KV, group, T, D]
    scores = (qg @ keys.transpose(1, 2, 0)[:, None]) * np.float32(1.0 / np.sqrt(D))   # [KV, group, T, S]
    future = np.arange(keys.shape[0])[None, :] > positions[:, None]
    scores = np.where(future, np.float32(-np.inf), scores)
    out = softmax(scores) @ values.transpose(1, 0, 2)[:, None]            # [KV, group, T, D]
    return out.transpose(2, 0, 1, 3).reshape(T, H * D)


class QwenAttention:
    """GQA with optional Q/K/V biases (Qwen2) and per-head Q/K RMSNorm (Qwen3, LFM2), NEOX RoPE."""

    def __init__(self, n_heads: int, n_kv_heads: int, head_dim: int, rope_theta: float, eps: float,
                 load: Loader, prefix: str, *, biases: bool, qk_norm: bool):
        self.n_heads, self.n_kv_heads, self.head_dim, self.eps = n_heads, n_kv_heads, head_dim, eps
        self.wq, self.wk, self.wv, self.wo = (load(prefix + n + ".weight")
                                              for n in ("attn_q", "attn_k", "attn_v", "attn_output"))
        zeros = np.float32(0.0)
        self.bq, self.bk, self.bv = ((load(prefix + n + ".bias") for n in ("attn_q", "attn_k", "attn_v"))
                                     if biases else (zeros, zeros, zeros))
        self.q_norm = load(prefix + "attn_q_norm.weight") if qk_norm else None
        self.k_norm = load(prefix + "attn_k_norm.weight") if qk_norm else None
        self.inv_freq = rope_inv_freq(head_dim, rope_theta)

    def __call__(self, x: np.ndarray, start: int, cache: KVCache) -> np.ndarray:
        T, D = x.shape[0], self.head_dim
        positions = np.arange(start, start + T)
        q = (_linear(x, self.wq) + self.bq).reshape(T, self.n_heads, D)
        k = (_linear(x, self.wk) + self.bk).reshape(T, self.n_kv_heads, D)
        v = (_linear(x, self.wv) + self.bv).reshape(T, self.n_kv_heads, D)
        if self.q_norm is not None:
            q, k = rms_norm(q, self.q_norm, self.eps), rms_norm(k, self.k_norm, self.eps)
        q, k = rope_neox(q, positions, self.inv_freq), rope_neox(k, positions, self.inv_freq)
        keys, values = cache.update(start, k, v)
        return _linear(_causal_gqa(q, keys, values, positions), self.wo)


class QwenBlock(LlamaBlock):
    """Pre-norm block as LlamaBlock, with QwenAttention."""

    def __init__(self, args: LlamaArgs, load: Loader, i: int, *, biases: bool, qk_norm: bool):
        p = f"blk.{i}."
        self.eps = args.norm_eps
        self.attn_norm = load(p + "attn_norm.weight")
        self.attn = QwenAttention(args.n_heads, args.n_kv_heads, args.head_dim, args.rope_theta, args.norm_eps,
                                  load, p, biases=biases, qk_norm=qk_norm)
        self.ffn_norm = load(p + "ffn_norm.weight")
        self.mlp = LlamaMLP(load(p + "ffn_gate.weight"), load(p + "ffn_up.weight"), load(p + "ffn_down.weight"))


class Qwen2Model(LlamaModel):
    """Qwen2: the llama model with Q/K/V biases and NEOX RoPE."""
    BIASES, QK_NORM = True, False

    def __init__(self, args: LlamaArgs, load: Loader, has_output: bool):
        if args.rope_dim != args.head_dim:
            raise UnsupportedModelError("partial rotary embeddings are not supported by the reference model")
        self.args = args
        self.tok_embeddings = load("token_embd.weight")
        self.layers = [QwenBlock(args, load, i, biases=self.BIASES, qk_norm=self.QK_NORM)
                       for i in range(args.n_layers)]
        self.norm = load("output_norm.weight")
        self.output = load("output.weight") if has_output else self.tok_embeddings


class Qwen3Model(Qwen2Model):
    """Qwen3: per-head Q/K RMSNorm, no biases, head size from attention.key_length."""
    BIASES, QK_NORM = False, True


class ConvCache:
    """A short-convolution layer's memory: B*x at every position so far, [S, E] (like a KV cache, so rewinding works
    by position; the convolution at position p reads positions p - L + 1 .. p)."""

    def __init__(self, dim: int, capacity: int = 64):
        self.bx = np.zeros((capacity, dim), np.float32)
        self.length = 0

    def update(self, start: int, bx: np.ndarray) -> np.ndarray:
        end = start + bx.shape[0]
        if end > self.bx.shape[0]:
            grown = np.zeros((max(end, 2 * self.bx.shape[0]), self.bx.shape[1]), np.float32)
            grown[:self.length] = self.bx[:self.length]
            self.bx = grown
        self.bx[start:end] = bx
        self.length = end
        return self.bx[:end]


class Lfm2ShortConv:
    """B, C, x = split(in_proj(h)); y = C * causal depthwise conv_L(B * x); out_proj(y).
    conv_L at position p: sum_k w[:, k] * bx[p - (L - 1) + k] over k < L, positions before 0 reading zero."""

    def __init__(self, load: Loader, prefix: str):
        self.w_in = load(prefix + "shortconv.in_proj.weight")             # [3E, E]
        self.taps = load(prefix + "shortconv.conv.weight")                # [E, L]
        self.w_out = load(prefix + "shortconv.out_proj.weight")           # [E, E]

    def __call__(self, x: np.ndarray, start: int, cache: ConvCache) -> np.ndarray:
        E, L = self.taps.shape
        T = x.shape[0]
        b, c, xx = np.split(_linear(x, self.w_in), 3, axis=1)
        hist = cache.update(start, b * xx)                                 # [start + T, E]
        padded = np.concatenate([np.zeros((L - 1, E), np.float32), hist])  # position p is row p + L - 1
        conv = np.stack([(padded[start + t:start + t + L] * self.taps.T).sum(0) for t in range(T)])
        return _linear(c * conv, self.w_out)


@dataclass
class Lfm2Args:
    n_layers: int
    dim: int
    n_heads: int
    n_kv_heads: int                # of the attention layers
    head_dim: int
    ffn_dim: int
    vocab_size: int
    context_length: int
    rope_theta: float
    norm_eps: float
    attention: list                # per layer: True for attention, False for short convolution

    @classmethod
    def from_gguf(cls, g: GGUFFile) -> "Lfm2Args":
        n_layers = int(g.arch_get("block_count"))
        kv = g.arch_get("attention.head_count_kv")
        kv = [int(k) for k in kv] if isinstance(kv, list) else [int(kv)] * n_layers
        if len(kv) != n_layers or len({k for k in kv if k}) > 1:
            raise UnsupportedModelError(f"lfm2 per-layer KV head counts {kv} do not fit {n_layers} layers with one "
                                        f"KV head count for every attention layer")
        dim, n_heads = int(g.arch_get("embedding_length")), int(g.arch_get("attention.head_count"))
        return cls(n_layers=n_layers, dim=dim, n_heads=n_heads, n_kv_heads=max(kv) or 1,
                   head_dim=int(g.arch_get("attention.key_length", dim // n_heads)),
                   ffn_dim=int(g.arch_get("feed_forward_length")),
                   vocab_size=int(g.tensor("token_embd.weight").shape[1]),
                   context_length=int(g.arch_get("context_length")),
                   rope_theta=float(g.arch_get("rope.freq_base", 1000000.0)),
                   norm_eps=float(g.arch_get("attention.layer_norm_rms_epsilon")),
                   attention=[k > 0 for k in kv])


class Lfm2Block:
    """x + op(norm(x)) with op a QwenAttention (QK-norm) or an Lfm2ShortConv, then + SwiGLU(norm(.))."""

    def __init__(self, args: Lfm2Args, load: Loader, i: int):
        p = f"blk.{i}."
        self.eps = args.norm_eps
        self.op_norm = load(p + "attn_norm.weight")
        self.op = (QwenAttention(args.n_heads, args.n_kv_heads, args.head_dim, args.rope_theta, args.norm_eps,
                                 load, p, biases=False, qk_norm=True)
                   if args.attention[i] else Lfm2ShortConv(load, p))
        self.ffn_norm = load(p + "ffn_norm.weight")
        self.mlp = LlamaMLP(load(p + "ffn_gate.weight"), load(p + "ffn_up.weight"), load(p + "ffn_down.weight"))

    def __call__(self, x: np.ndarray, start: int, cache) -> np.ndarray:
        h = x + self.op(rms_norm(x, self.op_norm, self.eps), start, cache)
        return h + self.mlp(rms_norm(h, self.ffn_norm, self.eps))


class Lfm2Model(LlamaModel):
    """LFM2: short-convolution and attention layers; final norm token_embd_norm; LM head tied unless output.weight."""

    def __init__(self, args: Lfm2Args, load: Loader, has_output: bool):
        self.args = args
        self.tok_embeddings = load("token_embd.weight")
        self.layers = [Lfm2Block(args, load, i) for i in range(args.n_layers)]
        self.norm = load("token_embd_norm.weight")
        self.output = load("output.weight") if has_output else self.tok_embeddings

    @classmethod
    def from_gguf(cls, g: GGUFFile, load: Loader) -> "Lfm2Model":
        return cls(Lfm2Args.from_gguf(g), load, "output.weight" in g.tensors)

    def new_cache(self) -> list:
        a = self.args
        return [KVCache(a.n_kv_heads, a.head_dim) if att else ConvCache(a.dim) for att in a.attention]


ARCHITECTURES.update({"qwen2": Qwen2Model, "qwen3": Qwen3Model, "lfm2": Lfm2Model})
