"""A float32 numpy forward pass: the CPU reference the GPU engine is checked against, and a CPU fallback.

Weights are dequantized once at load (``cera_web.quants``) and kept as float32 arrays in numpy order
``(out_features, in_features)``; activations stay float32 throughout. Nothing here needs more than numpy, so it
runs in Pyodide too (slowly, and only for small models: a 135M-parameter model takes about 0.55 GB as float32).

Layout of the module, mlx-lm style: shared helpers, then one small class per block (Attention, ShortConv, MLP,
Block, the Transformer), each built from the file's ModelSpec (cera_web/models/spec.py: what the GPU model is built
from too; the architectures are registered there), then ReferenceModel, the wrapper that holds the caches.

Shapes: T = tokens in this call, S = cached positions (past + this call), H = query heads, KV = key/value heads,
D = head dimension, E = embedding width, F = feed-forward width, V = vocabulary.

RoPE and the GGUF layout: for ``llama`` the llama.cpp converter permutes the rows of ``attn_q``/``attn_k`` so that
the two halves HF rotates together (i, i + D/2) become adjacent rows (2i, 2i + 1). RoPE is therefore applied to
interleaved pairs here ("normal" mode in ggml), which gives exactly the same logits as HF's rotate-half on the
unpermuted weights.
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np

from cera_web.errors import ContextOverflowError, InputError, UnsupportedModelError
from cera_web.gguf import GGUFFile, open_gguf, path_reader, tensor_bytes
from cera_web.models.spec import ModelSpec, model_spec, not_implemented
from cera_web.cpu_kernels import kernel_type
from cera_web.quants import dequantize_tensor, supported_types

Loader = Callable[[str], np.ndarray]   # tensor name -> float32 array in numpy order
# the weights used only as x @ w.T (or, the embedding, by row): those the CPU kernels may keep quantized
MATRICES = tuple(f"{n}.weight" for n in ("token_embd", "output", "attn_q", "attn_k", "attn_v", "attn_output",
                                          "ffn_gate", "ffn_up", "ffn_down", "shortconv.in_proj", "shortconv.out_proj"))


# ---------------------------------------------------------------------------------------------------------------
# shared pieces

def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x [T, E] scaled to unit root-mean-square per row, times weight [E]."""
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return (x / np.sqrt(ms + np.float32(eps))) * weight


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU with the tanh approximation (GeGLU's gate, Gemma)."""
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(np.float32(np.sqrt(2 / np.pi)) * (x + np.float32(0.044715)
                                                                                             * x * x * x)))


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
    """Keys and values of one attention layer for the positions seen so far; grows by doubling. half: values are
    stored rounded to float16 (what a kv_cache="f16" engine keeps)."""

    def __init__(self, n_kv_heads: int, head_dim: int, capacity: int = 64, half: bool = False):
        self.k = np.zeros((capacity, n_kv_heads, head_dim), np.float32)
        self.v = np.zeros_like(self.k)
        self.length = 0
        self.half = half

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
        if self.half:
            k, v = k.astype(np.float16), v.astype(np.float16)
        self.k[start:end] = k
        self.v[start:end] = v
        self.length = end
        return self.k[:end], self.v[:end]


def _linear(x: np.ndarray, w) -> np.ndarray:
    """x [T, in] @ w [out, in]^T -> [T, out]. w: a float32 array, or a weight kept quantized in the CPU kernels'
    memory (cera_web.cpu_kernels.QuantWeight: 8-bit activations, int8 products)."""
    return x @ w.T if isinstance(w, np.ndarray) else w.matmul(x)


# ---------------------------------------------------------------------------------------------------------------
# the blocks, built from the ModelSpec (cera_web/models/spec.py)
#
# llama GGUFs have their Q/K rows permuted by llama.cpp's converter, so RoPE rotates interleaved pairs; qwen2, qwen3
# and lfm2 keep HF's row order, so RoPE rotates the halves (x[i], x[i + D/2]) together ("NEOX" mode): spec.rope_neox.

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


def _causal_gqa(q: np.ndarray, keys: np.ndarray, values: np.ndarray, positions: np.ndarray,
                scale: np.float32, window: int | None = None) -> np.ndarray:
    """q [T, H, D] against keys/values [S, KV, D] (query head h reads KV head h // (H / KV)), scores times scale,
    causal (and with a window: the last ``window`` positions only); -> [T, H*D]."""
    T, H, D = q.shape
    KV = keys.shape[1]
    qg = q.reshape(T, KV, H // KV, D).transpose(1, 2, 0, 3)               # [KV, group, T, D]
    scores = (qg @ keys.transpose(1, 2, 0)[:, None]) * scale   # [KV, group, T, S]
    future = np.arange(keys.shape[0])[None, :] > positions[:, None]
    if window:
        future |= np.arange(keys.shape[0])[None, :] <= positions[:, None] - window
    scores = np.where(future, np.float32(-np.inf), scores)
    out = softmax(scores) @ values.transpose(1, 0, 2)[:, None]            # [KV, group, T, D]
    return out.transpose(2, 0, 1, 3).reshape(T, H * D)


class Attention:
    """GQA with optional Q/K/V biases (Qwen2) and per-head Q/K RMSNorm (Qwen3, LFM2), RoPE in the spec's layout."""

    def __init__(self, spec: ModelSpec, i: int, load: Loader):
        p, layer = f"blk.{i}.", spec.layers[i]
        self.n_heads, self.n_kv_heads, self.head_dim, self.eps = layer.heads, layer.kv_heads, spec.head_dim, spec.eps
        self.scale = np.float32(spec.query_scale)
        self.wq, self.wk, self.wv, self.wo = (load(p + n + ".weight")          # [H*D, E], [KV*D, E] x 2, [E, H*D]
                                              for n in ("attn_q", "attn_k", "attn_v", "attn_output"))
        self.biases = [load(p + f"attn_{n}.bias") for n in "qkv"] if spec.qkv_bias else None
        self.q_norm = load(p + "attn_q_norm.weight") if spec.qk_norm else None
        self.k_norm = load(p + "attn_k_norm.weight") if spec.qk_norm else None
        self.inv_freq = rope_inv_freq(spec.head_dim, layer.rope_theta)
        if spec.rope_scale != 1.0:
            self.inv_freq = (self.inv_freq / np.float32(spec.rope_scale)).astype(np.float32)
        if spec.rope_freqs:
            self.inv_freq = (self.inv_freq / load(spec.rope_freqs)).astype(np.float32)
        self.rope = rope_neox if spec.rope_neox else rope_interleaved
        self.window = layer.sliding_window

    def __call__(self, x: np.ndarray, start: int, cache: KVCache) -> np.ndarray:
        T, D = x.shape[0], self.head_dim
        positions = np.arange(start, start + T)
        q, k, v = _linear(x, self.wq), _linear(x, self.wk), _linear(x, self.wv)
        if self.biases is not None:
            q, k, v = q + self.biases[0], k + self.biases[1], v + self.biases[2]
        q, k, v = q.reshape(T, self.n_heads, D), k.reshape(T, self.n_kv_heads, D), v.reshape(T, self.n_kv_heads, D)
        if self.q_norm is not None:
            q, k = rms_norm(q, self.q_norm, self.eps), rms_norm(k, self.k_norm, self.eps)
        q, k = self.rope(q, positions, self.inv_freq), self.rope(k, positions, self.inv_freq)
        keys, values = cache.update(start, k, v)                         # [S, KV, D]
        return _linear(_causal_gqa(q, keys, values, positions, self.scale, self.window), self.wo)


class MLP:
    """Gated FFN: down(act(gate(x)) * up(x)), act SiLU (SwiGLU) or GELU-tanh (GeGLU)."""

    def __init__(self, gate, up, down, act=silu):
        self.gate, self.up, self.down, self.act = gate, up, down, act   # [F, E], [F, E], [E, F]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return _linear(self.act(_linear(x, self.gate)) * _linear(x, self.up), self.down)


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


class ShortConv:
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


class Block:
    """Pre-norm block: x + op(norm(x)) with op an Attention or a ShortConv (spec.layers[i].kind), then
    + mlp(norm(.))."""

    def __init__(self, spec: ModelSpec, i: int, load: Loader):
        p = f"blk.{i}."
        self.eps = spec.eps
        self.op_norm = load(p + "attn_norm.weight")
        self.op = Attention(spec, i, load) if spec.layers[i].attention else ShortConv(load, p)
        self.ffn_norm = load(p + "ffn_norm.weight")
        self.mlp = MLP(load(p + "ffn_gate.weight"), load(p + "ffn_up.weight"), load(p + "ffn_down.weight"),
                       gelu_tanh if spec.activation == "gelu_tanh" else silu)
        post = spec.layers[i].post_norms          # Gemma: the op's and the MLP's outputs normalised before the adds
        self.post_op = load(p + "post_attention_norm.weight") if post else None
        self.post_ffn = load(p + "post_ffw_norm.weight") if post else None

    def __call__(self, x: np.ndarray, start: int, cache) -> np.ndarray:
        y = self.op(rms_norm(x, self.op_norm, self.eps), start, cache)
        h = x + (y if self.post_op is None else rms_norm(y, self.post_op, self.eps))
        y = self.mlp(rms_norm(h, self.ffn_norm, self.eps))
        return h + (y if self.post_ffn is None else rms_norm(y, self.post_ffn, self.eps))


class Transformer:
    """token ids -> logits for any ModelSpec the blocks above compute."""

    def __init__(self, spec: ModelSpec, load: Loader):
        for name in not_implemented(spec):
            raise UnsupportedModelError(f"{spec.arch}: the reference model does not implement spec.{name} yet")
        self.spec = spec
        self.tok_embeddings = load("token_embd.weight")                    # [V, E]
        self.layers = [Block(spec, i, load) for i in range(spec.n_layers)]
        self.norm = load(spec.final_norm)
        # tied embeddings: files without output.weight reuse the embedding matrix as the output projection
        self.output = self.tok_embeddings if spec.lm_head == "token_embd.weight" else load(spec.lm_head)  # [V, E]

    def new_cache(self, kv_cache: str = "f32") -> list:
        s = self.spec
        return [KVCache(layer.kv_heads, s.head_dim, half=kv_cache == "f16") if layer.attention
                else ConvCache(s.hidden) for layer in s.layers]

    def __call__(self, ids: np.ndarray, start: int, cache: list, last_only: bool = False) -> np.ndarray:
        x = self.tok_embeddings[ids]                                       # [T, E]
        if self.spec.embed_scale != 1.0:
            x = x * np.float32(self.spec.embed_scale)
        for layer, layer_cache in zip(self.layers, cache):
            x = layer(x, start, layer_cache)
        if last_only:
            x = x[-1:]
        return _linear(rms_norm(x, self.norm, self.spec.eps), self.output)   # [T, V]


# ---------------------------------------------------------------------------------------------------------------
# the engine-facing wrapper

class ReferenceModel:
    """A model plus its KV cache. ``forward`` continues the cached sequence (or rewinds it to ``start_pos``)."""

    def __init__(self, model: Transformer, kv_cache: str = "f32"):
        self.model = model
        self.spec = model.spec
        self.architecture = model.spec.arch
        self.vocab_size = model.spec.vocab
        self.context_length = model.spec.context_train
        self.cache = model.new_cache(kv_cache)      # "f16": keys and values rounded to halves as they are cached
        self.position = 0                     # number of tokens in the cache

    @classmethod
    def from_gguf(cls, source, read=None, spec: ModelSpec | None = None, kv_cache: str = "f32",
                  kernels=None) -> "ReferenceModel":
        """Load from a path, or from a parsed ``GGUFFile`` plus ``read(offset, n) -> bytes`` (a callable, or an
        object with a ``read`` method such as ``cera_web.source.FileSource``). spec: the file's ModelSpec, when the
        caller has it already (else it is read here). kv_cache: "f16" rounds cached keys and values to halves.
        kernels: a cera_web.cpu_kernels.Kernels instance: the matrices of a type it handles stay in its memory as
        their GGUF blocks (products with 8-bit activations) instead of float32 arrays (None: all float32)."""
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
        spec = spec or model_spec(g)
        g.check_tensor_types(supported_types())

        def load(name: str):
            info = g.tensor(name)
            if kernels is not None and len(info.shape) == 2 and name.endswith(MATRICES) and kernel_type(info.type):
                return kernels.place(tensor_bytes(read, info), info.type, info.shape[1], info.shape[0])
            return dequantize_tensor(info, tensor_bytes(read, info))

        return cls(Transformer(spec, load), kv_cache)

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
