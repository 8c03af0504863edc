"""Qwen2 and Qwen3 (GGUF arch "qwen2", "qwen3") on WebGPU: the Llama decoder (models/llama.py) with

- NEOX RoPE: llama.cpp's converter does not permute Q/K rows for these, so RoPE rotates the pairs (x[i], x[i + D/2]);
- Qwen2: biases on the Q, K and V projections (``blk.N.attn_{q,k,v}.bias``), added by the rope_store kernel;
- Qwen3: an RMSNorm over each head of Q and of K before RoPE (``blk.N.attn_{q,k}_norm.weight``, one [head_dim] gain
  each, shared by all heads), and a head size from ``attention.key_length`` that need not be hidden / heads.

Everything else (fused norm + projections, stacked Q/K/V and gate/up weights, the KV cache, the head) is
LlamaModel's. ``QwenModel`` is also the base of the LFM2 model, whose attention layers are Qwen3-style.

``chunk_logits`` (all models here) returns the logits at every position of a prompt chunk, for tests and scoring.
"""
from __future__ import annotations


import numpy as np

from ..errors import UnsupportedModelError
from .base import Recorder
from .llama import LlamaModel


class QwenModel(LlamaModel):
    NEOX = True
    BIASES = False           # Q/K/V projection biases (Qwen2)

    def attention_layers(self) -> list[int]:
        return list(range(self.args.n_layers))

    def build(self):
        """Called at the end of LlamaModel.__init__ (its buffers exist): check the attention tensors against the
        metadata, upload biases / QK-norm gains per layer, then record the plans."""
        a = self.args
        self.qkv_bias, self.qk_gain = {}, {}
        for i in self.attention_layers():
            check_attention(self, i, a.kv_heads)
            p = f"blk.{i}."
            if self.BIASES:
                parts = [layer_vector(self, i, p + f"attn_{n}.bias", rows) for n, rows in
                         (("q", a.heads * a.head_dim), ("k", a.kv_heads * a.head_dim), ("v", a.kv_heads * a.head_dim))]
                self.qkv_bias[i] = self.f32_buffer(np.concatenate(parts), p + "qkv bias")
            if self.QK_NORM:
                gains = [layer_vector(self, i, p + f"attn_{n}_norm.weight", a.head_dim) for n in ("q", "k")]
                self.qk_gain[i] = self.f32_buffer(np.concatenate(gains), p + "qk norm")
        self._plan_all_logits = None
        super().build()

    # -- logits at every position ----------------------------------------------------------------------------------
    async def chunk_logits(self, ids, pos0: int) -> np.ndarray:
        """Run one prompt chunk (len(ids) <= chunk) at positions pos0... like prefill, and return the logits at each
        of its positions, [len(ids), vocab] float32 (position pos0 + t predicts the token after ids[t])."""
        if self._plan_all_logits is None:     # recorded on first use: most sessions never need it
            self.all_logits = self.dev.create_buffer(4 * self.chunk * self.args.vocab, label="all logits")
            rec = Recorder(self.dev)
            self.linear(rec, self.chunk, self.lm_head, self.x, self.all_logits, gain=self.norms[self.final_norm])
            self._plan_all_logits = rec.finish()
        self.dev.write_buffer(self.tokens, np.asarray(ids, np.uint32))
        self.set_step(len(ids), pos0, 0)
        self.dev.submit([self.plan_prefill, self._plan_all_logits])
        raw = await self.dev.read(self.all_logits, 0, 4 * len(ids) * self.args.vocab)
        return np.frombuffer(raw, np.float32).reshape(len(ids), self.args.vocab).copy()


class Qwen2Model(QwenModel):
    BIASES = True


class Qwen3Model(QwenModel):
    QK_NORM = True


# -- checks shared with LFM2 -------------------------------------------------------------------------------------

def layer_vector(model, i: int, name: str, n: int) -> np.ndarray:
    """The F32/F16 vector ``name`` of layer i, checked to hold n values."""
    if name not in model.gguf.tensors:
        raise UnsupportedModelError(
            f"layer {i}: the model file has no tensor {name!r}, which a {model.gguf.architecture} attention layer "
            f"needs; the file does not match the {model.gguf.architecture} layout (re-convert it)")
    v = model.vector(name)
    if v.size != n:
        raise UnsupportedModelError(f"layer {i}: tensor {name!r} has {v.size} values, expected {n} "
                                    f"(from the head counts and head size in the metadata)")
    return v


def check_attention(model, i: int, kv_heads: int):
    """The Q/K/V/output weights of layer i have the shapes the metadata's head counts and head size imply."""
    a, p = model.args, f"blk.{i}."
    q_dim, kv_dim = a.heads * a.head_dim, kv_heads * a.head_dim
    expect = {"attn_q": (q_dim, a.hidden), "attn_k": (kv_dim, a.hidden), "attn_v": (kv_dim, a.hidden),
              "attn_output": (a.hidden, q_dim)}
    for n, (rows, cols) in expect.items():
        name = p + n + ".weight"
        if name not in model.gguf.tensors:
            raise UnsupportedModelError(
                f"layer {i}: the model file has no tensor {name!r}, which an attention layer needs; the file does "
                f"not match the {model.gguf.architecture} layout (re-convert it)")
        got = model.shape(name)
        if got != (rows, cols):
            raise UnsupportedModelError(
                f"layer {i}: tensor {name!r} is {got[0]} x {got[1]} (rows x columns) but the metadata implies "
                f"{rows} x {cols} ({a.heads} query heads, {kv_heads} KV heads of size {a.head_dim}, hidden "
                f"{a.hidden}): the head counts are inconsistent with the weights")
