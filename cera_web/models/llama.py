"""Llama-family decoder (GGUF arch "llama"; SmolLM2, Llama 2/3, Mistral-style GQA models) on WebGPU.

Per layer:  h = x + Wo · attention(rope(Wq · norm(x)), rope(Wk · norm(x)), Wv · norm(x))   (5 dispatches a layer
            x = h + Wdown · (silu(Wgate · norm(h)) * Wup · norm(h))      when decoding: qkv, attention, o, gate/up, down;
            the norms, SwiGLU and residual adds are fused into the projections, see matmul.wgsl)
then logits = Wout · norm(x) for the last token (Wout = the embedding table when the file ties them).

GGUF llama files store Q and K permuted so that RoPE rotates interleaved pairs (x[2i], x[2i+1]): NEOX = False.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import kernels
from ..errors import UnsupportedModelError
from .base import GPUModel, Recorder


@dataclass
class LlamaArgs:
    n_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    eps: float
    rope_theta: float
    rope_scale: float
    context_train: int

    @classmethod
    def from_gguf(cls, g) -> "LlamaArgs":
        hidden = g.arch_get("embedding_length")
        heads = g.arch_get("attention.head_count")
        kv_heads = g.arch_get("attention.head_count_kv", heads)
        if isinstance(kv_heads, list):
            raise UnsupportedModelError("per-layer KV head counts are not supported for llama models")
        for key, v in (("embedding_length", hidden), ("attention.head_count", heads)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise UnsupportedModelError(f"metadata {g.architecture}.{key} = {v!r} is not a positive integer: "
                                            f"the file is damaged or unusual")
        head_dim = g.arch_get("attention.key_length", hidden // heads)
        rope_dims = g.arch_get("rope.dimension_count", head_dim)
        if rope_dims != head_dim:
            raise UnsupportedModelError(f"partial rotary embeddings ({rope_dims} of {head_dim} dims) are not supported")
        if heads % int(kv_heads):
            raise UnsupportedModelError(f"{heads} query heads cannot be grouped over {kv_heads} KV heads")
        scaling = g.arch_get("rope.scaling.type", "none")
        scale = 1.0
        if scaling == "linear":
            scale = float(g.arch_get("rope.scaling.factor", 1.0))
        elif scaling not in ("none", None):
            raise UnsupportedModelError(f"rope scaling {scaling!r} is not supported")
        vocab = g.tensor("token_embd.weight").shape[1]
        ints = {"block_count": g.arch_get("block_count"), "embedding_length": hidden, "attention.head_count": heads,
                "attention.head_count_kv": kv_heads, "attention.key_length": head_dim,
                "feed_forward_length": g.arch_get("feed_forward_length")}
        for key, v in ints.items():
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 1 << 20:
                raise UnsupportedModelError(f"metadata {g.architecture}.{key} = {v!r} is not a valid size "
                                            f"(a positive integer below 2^20): the file is damaged or unusual")
        floats = {"rope.freq_base": g.arch_get("rope.freq_base", 10000.0),
                  "attention.layer_norm_rms_epsilon": g.arch_get("attention.layer_norm_rms_epsilon", 1e-5)}
        for key, v in floats.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
                raise UnsupportedModelError(f"metadata {g.architecture}.{key} = {v!r} is not a positive finite "
                                            f"number: the file is damaged")
        return cls(
            n_layers=int(g.arch_get("block_count")), hidden=hidden, heads=heads, kv_heads=int(kv_heads),
            head_dim=head_dim, ffn=int(g.arch_get("feed_forward_length")), vocab=int(vocab),
            eps=float(g.arch_get("attention.layer_norm_rms_epsilon", 1e-5)),
            rope_theta=float(g.arch_get("rope.freq_base", 10000.0)), rope_scale=scale,
            context_train=int(g.arch_get("context_length", 2048)))


class LlamaModel(GPUModel):
    NEOX = False              # RoPE pairs: (x[2i], x[2i+1]) as llama.cpp's converter lays Q/K out
    QK_NORM = False           # per-head RMSNorm of Q and K (Qwen3, LFM2)
    final_norm = "output_norm.weight"

    def __init__(self, dev, gguf, source, *, context_size=2048, chunk=64, on_progress=None):
        super().__init__(dev, gguf, source, context_size=context_size, chunk=chunk, on_progress=on_progress)
        a = self.args = LlamaArgs.from_gguf(gguf)
        self.vocab = a.vocab
        self.lm_head = "output.weight" if "output.weight" in gguf.tensors else "token_embd.weight"
        names = ["token_embd.weight", "output_norm.weight", self.lm_head]
        for i in range(a.n_layers):
            names += [f"blk.{i}.{n}.weight" for n in
                      ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                       "ffn_down")]
        self.plan_upload(names)
        self.check_shapes(names)

        T, dev = chunk, self.dev
        q_dim, kv_dim = a.heads * a.head_dim, a.kv_heads * a.head_dim
        self.qkv_dim = q_dim + 2 * kv_dim
        self.x = dev.create_buffer(4 * T * a.hidden, label="x")              # [T, hidden] residual stream
        self.qkv = dev.create_buffer(4 * T * self.qkv_dim, label="qkv")      # [T, q | k | v] projections
        self.q = dev.create_buffer(4 * T * q_dim, label="q")                 # [T, heads * head_dim] after RoPE
        self.att = dev.create_buffer(4 * T * q_dim, label="att")             # [T, heads * head_dim]
        self.hid = dev.create_buffer(4 * T * a.ffn, label="hid")             # [T, ffn] silu(gate) * up
        self.logits = dev.create_buffer(4 * a.vocab, label="logits")         # [vocab], last token only
        # KV cache: one [context, kv_heads * head_dim] buffer per layer for K and for V
        self.k_cache = [dev.create_buffer(4 * context_size * kv_dim, label=f"k{i}") for i in range(a.n_layers)]
        self.v_cache = [dev.create_buffer(4 * context_size * kv_dim, label=f"v{i}") for i in range(a.n_layers)]
        freq = a.rope_theta ** (-np.arange(0, a.head_dim, 2, dtype=np.float64) / a.head_dim) / a.rope_scale
        if "rope_freqs.weight" in gguf.tensors:              # Llama 3: per-frequency divisors
            freq = freq / self.vector("rope_freqs.weight")
        self.freq = self.f32_buffer(freq.astype(np.float32), "rope freq")
        self.norms = {n: self.f32_buffer(self.vector(n), n) for n in names if n.endswith("norm.weight")}
        self.ones = self.f32_buffer(np.ones(max(a.hidden, a.ffn, q_dim, 2 * a.head_dim), np.float32), "ones")
        self.bias = self.f32_buffer(np.zeros(self.qkv_dim, np.float32), "no bias")
        self.qkv_bias, self.qk_gain = {}, {}      # per layer, for the families that have them (models/qwen.py)
        self.build()

    def check_shapes(self, names):
        """Every weight has the shape the metadata implies (a file whose header disagrees with its tensors would
        otherwise run and produce garbage)."""
        a = self.args
        q_dim, kv_dim = a.heads * a.head_dim, a.kv_heads * a.head_dim
        heads = f"{a.heads} query heads, {a.kv_heads} KV heads of size {a.head_dim}, hidden {a.hidden}"
        self.check_weight("token_embd.weight", a.vocab, a.hidden, f"vocabulary {a.vocab}, hidden {a.hidden}")
        if self.lm_head != "token_embd.weight":
            self.check_weight(self.lm_head, a.vocab, a.hidden, f"vocabulary {a.vocab}, hidden {a.hidden}")
        expect = {"attn_q": (q_dim, a.hidden), "attn_k": (kv_dim, a.hidden), "attn_v": (kv_dim, a.hidden),
                  "attn_output": (a.hidden, q_dim), "ffn_gate": (a.ffn, a.hidden), "ffn_up": (a.ffn, a.hidden),
                  "ffn_down": (a.hidden, a.ffn)}
        for i in range(a.n_layers):
            for n, (rows, cols) in expect.items():
                self.check_weight(f"blk.{i}.{n}.weight", rows, cols, f"{heads}, feed-forward {a.ffn}")
        for n in names:
            if n.endswith("norm.weight"):
                self.check_vector(n, a.hidden, f"hidden {a.hidden}")

    def linear(self, rec, T, name, x, y, *, gain=None, weight=None, rows=None, **kw):
        """y (+)= W[name] · x for every token of a pass of up to T tokens.
        gain: a norm weight buffer (the input is RMS-normalised first); weight/rows: a stacked weight buffer and its
        row count; kw: accum / glu / last_only / ystride / yoff (see matmul.wgsl).
        On GPUs prefill passes (T > 1) use the tiled matrix-matrix kernel; decode, the LM head and CPU adapters
        (where the tiles' barriers and padding to 32 tokens cost more than they save on short prompts) use the
        matrix-vector one."""
        n, k = self.shape(name)
        n = rows or n
        fmt = self.gguf.tensor(name).type
        # a weight too big for one binding is split into row ranges: one dispatch each, writing its rows' outputs
        parts = [(weight, 0, n)] if weight is not None else self.pieces(name)
        ystride, yoff = kw.pop("ystride", None) or n, kw.pop("yoff", 0)
        for buf, r0, rows_here in parts:
            label = name if len(parts) == 1 else f"{name}[{r0}:{r0 + rows_here}]"
            buffers = [buf, x, y, self.step, gain or self.ones]
            common = dict(norm=gain is not None, eps=self.args.eps, ystride=ystride, yoff=yoff + r0, **kw)
            if T > 1 and not kw.get("last_only") and k % 32 == 0 and not self.dev.is_cpu:
                tile = kernels.tiled_tile(rows_here, k, T)
                rec.add(kernels.matmul_tiled(fmt, k, rows_here, tile=tile, **common), buffers,
                        kernels.tiled_groups(rows_here, T, tile), label)
                continue
            shape = kernels.matvec_shape(k // kernels.block_elems(fmt), 1 if kw.get("last_only") else T,
                                         self.dev.is_cpu, getattr(self.dev, "subgroup_size", None))
            rec.add(kernels.matmul(fmt, k, rows_here, **shape, **common), buffers,
                    kernels.spread(kernels.matmul_groups(rows_here, shape["lanes"], shape["rpt"], shape["wg"])), label)

    def attention_block(self, rec, T, i):
        """x += Wo · attention(norm(x)): Q/K/V in one projection when they share a type, then RoPE into the cache."""
        a, p = self.args, f"blk.{i}."
        gain = self.norms[p + "attn_norm.weight"]
        names = [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]
        stacked = self.stacked(names)
        if stacked is not None:
            self.linear(rec, T, names[0], self.x, self.qkv, gain=gain, weight=stacked, rows=self.qkv_dim)
        else:
            col = 0
            for name in names:
                self.linear(rec, T, name, self.x, self.qkv, gain=gain, ystride=self.qkv_dim, yoff=col)
                col += self.shape(name)[0]
        scale = 1.0 / math.sqrt(a.head_dim)
        bias, qk_gain = self.qkv_bias.get(i, self.bias), self.qk_gain.get(i, self.ones)
        if T == 1:   # decoding: RoPE, the cache store and attention in one dispatch
            rec.add(kernels.attention_decode(a.heads, a.kv_heads, a.head_dim, self.NEOX, scale, self.QK_NORM, a.eps),
                    [self.qkv, bias, qk_gain, self.freq, self.k_cache[i], self.v_cache[i], self.att, self.step],
                    (a.heads, 1, 1), "attention")
        else:
            rec.add(kernels.rope_store(a.heads, a.kv_heads, a.head_dim, self.NEOX, self.QK_NORM, a.eps),
                    [self.qkv, bias, qk_gain, self.freq, self.q, self.k_cache[i], self.v_cache[i], self.step],
                    (a.heads + 2 * a.kv_heads, T, 1), "rope")
            rec.add(kernels.attention(a.heads, a.kv_heads, a.head_dim, scale),
                    [self.q, self.k_cache[i], self.v_cache[i], self.att, self.step],
                    kernels.attention_groups(a.heads, a.kv_heads, a.head_dim, T), "attention")
        self.linear(rec, T, p + "attn_output.weight", self.att, self.x, accum=True)

    def ffn_block(self, rec, T, i):
        """x += Wdown · (silu(Wgate · norm(x)) * Wup · norm(x)): gate and up in one pass when they share a type."""
        p = f"blk.{i}."
        gain = self.norms[p + "ffn_norm.weight"]
        names = [p + "ffn_gate.weight", p + "ffn_up.weight"]
        stacked = self.stacked(names)
        if stacked is not None:
            self.linear(rec, T, names[0], self.x, self.hid, gain=gain, weight=stacked, glu=True)
        else:
            gate, up = self.scratch(T)
            self.linear(rec, T, names[0], self.x, gate, gain=gain)
            self.linear(rec, T, names[1], self.x, up, gain=gain)
            rec.add(kernels.swiglu(self.args.ffn), [gate, up, self.hid, self.step], (-(-self.args.ffn // 64), T, 1))
        self.linear(rec, T, p + "ffn_down.weight", self.hid, self.x, accum=True)

    def scratch(self, T):
        """Gate and up buffers for files whose gate and up weights differ in type (no stacked GLU pass)."""
        if not hasattr(self, "_gate"):
            self._gate = self.dev.create_buffer(4 * self.chunk * self.args.ffn, label="gate")
            self._up = self.dev.create_buffer(4 * self.chunk * self.args.ffn, label="up")
        return self._gate, self._up

    def record_body(self, T):
        a, rec = self.args, Recorder(self.dev)
        self.record_embed(rec, T)
        for i in range(a.n_layers):
            self.attention_block(rec, T, i)
            self.ffn_block(rec, T, i)
        return rec.finish()

    def record_head(self, T):
        rec = Recorder(self.dev)
        self.linear(rec, T, self.lm_head, self.x, self.logits, gain=self.norms[self.final_norm], last_only=True)
        self.record_argmax(rec)
        return rec.finish()

    def record_argmax(self, rec):
        """Greedy token = argmax of the logits, into tokens[0] and the log: in two stages for large vocabularies."""
        parts = kernels.argmax_parts_count(self.vocab)
        if parts == 1:
            rec.add(kernels.argmax(self.vocab), [self.logits, self.tokens, self.log, self.step], (1, 1, 1), "argmax")
            return
        if getattr(self, "_argmax_pairs", None) is None:
            self._argmax_pairs = self.dev.create_buffer(8 * parts, label="argmax pairs")
        rec.add(kernels.argmax_parts(self.vocab), [self.logits, self._argmax_pairs], (parts, 1, 1), "argmax")
        rec.add(kernels.argmax(parts, pairs=True), [self._argmax_pairs, self.tokens, self.log, self.step], (1, 1, 1),
                "argmax")
