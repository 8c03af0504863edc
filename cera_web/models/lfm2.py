"""LFM2 (GGUF arch "lfm2", as llama.cpp's converter writes it) on WebGPU: a hybrid of short-convolution layers and
grouped-query attention layers.

Every layer:   h = x + op(norm(x))            norm: blk.N.attn_norm (HF "operator_norm")
               x = h + Wdown · (silu(Wgate · norm(h)) * Wup · norm(h))        (SwiGLU, blk.N.ffn_*)
op is, per layer (metadata attention.head_count_kv is a per-layer list; 0 marks a convolution layer):
- ShortConv:  B | C | x = Win · norm(x)  (blk.N.shortconv.in_proj, 3 * hidden rows);  y = C ⊙ conv(B ⊙ x);
              op = Wout · y  (shortconv.out_proj). conv is the causal depthwise convolution of length
              L = shortconv.l_cache over the sequence of B ⊙ x (taps blk.N.shortconv.conv.weight, GGUF shape
              (L, hidden)); a rolling state keeps the last L - 1 values of B ⊙ x per layer (shaders/conv1d.wgsl).
- attention:  as Qwen3: per-head RMSNorm of Q and K (attn_q_norm / attn_k_norm), NEOX RoPE, GQA (models/qwen.py).
then logits = Wemb · norm(x) with the final norm stored as token_embd_norm (HF "embedding_norm", applied at the
end despite its name) and the LM head tied to the embedding table (or output.weight when the file has one).

State: the KV caches and the conv states. A pass that starts at position 0 begins a new sequence, so it clears the
conv states first (see set_step); ``reset_state()`` does the same on demand.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import kernels
from ..errors import UnsupportedModelError
from .base import GPUModel, Recorder
from .qwen import QwenModel


@dataclass
class Lfm2Args:
    n_layers: int
    hidden: int
    heads: int
    kv_heads: int              # of every attention layer
    head_dim: int
    ffn: int
    vocab: int
    eps: float
    rope_theta: float
    l_cache: int               # short convolution length (taps); the state holds l_cache - 1 positions
    attention: list[bool]      # per layer: attention (True) or short convolution (False)
    context_train: int

    @classmethod
    def from_gguf(cls, g) -> "Lfm2Args":
        n_layers = int(g.arch_get("block_count"))
        hidden = int(g.arch_get("embedding_length"))
        heads = per_layer(g, "attention.head_count", n_layers)
        kv = per_layer(g, "attention.head_count_kv", n_layers)
        attention = [k > 0 for k in kv]
        att_layers = [i for i in range(n_layers) if attention[i]]
        head_counts = {heads[i] for i in att_layers}
        kv_counts = {kv[i] for i in att_layers}
        if len(head_counts) > 1 or len(kv_counts) > 1:
            raise UnsupportedModelError(
                f"the attention layers of this LFM2 model differ in head counts (query heads {heads}, KV heads "
                f"{kv} per layer); cera_web needs the same counts in every attention layer")
        n_heads = head_counts.pop() if head_counts else max(heads)
        n_kv = kv_counts.pop() if kv_counts else 1
        if n_heads < 1 or n_heads % n_kv:
            raise UnsupportedModelError(
                f"layer {att_layers[0]}: {n_heads} query heads cannot be grouped over {n_kv} KV heads")
        head_dim = int(g.arch_get("attention.key_length", hidden // n_heads))
        if int(g.arch_get("attention.value_length", head_dim)) != head_dim:
            raise UnsupportedModelError("attention.value_length differs from attention.key_length; not supported")
        if int(g.arch_get("rope.dimension_count", head_dim)) != head_dim:
            raise UnsupportedModelError("partial rotary embeddings are not supported")
        if g.arch_get("rope.scaling.type", "none") not in ("none", None):
            raise UnsupportedModelError(f"rope scaling {g.arch_get('rope.scaling.type')!r} is not supported")
        l_cache = int(g.arch_get("shortconv.l_cache"))
        conv_layers = [i for i in range(n_layers) if not attention[i]]
        if conv_layers and not 2 <= l_cache <= kernels.MAX_L_CACHE:
            i = conv_layers[0]
            raise UnsupportedModelError(
                f"layer {i} (short convolution, tensor 'blk.{i}.shortconv.conv.weight'): {g.architecture}."
                f"shortconv.l_cache = {l_cache} is not supported; the convolution kernel handles lengths 2 to "
                f"{kernels.MAX_L_CACHE}")
        return cls(n_layers=n_layers, hidden=hidden, heads=n_heads, kv_heads=n_kv, head_dim=head_dim,
                   ffn=int(g.arch_get("feed_forward_length")), vocab=int(g.tensor("token_embd.weight").shape[1]),
                   eps=float(g.arch_get("attention.layer_norm_rms_epsilon", 1e-5)),
                   rope_theta=float(g.arch_get("rope.freq_base", 1000000.0)), l_cache=l_cache,
                   attention=attention, context_train=int(g.arch_get("context_length", 2048)))


def per_layer(g, key: str, n_layers: int) -> list[int]:
    """Metadata that is either one count for all layers or a list with one per layer."""
    v = g.arch_get(key)
    if isinstance(v, list):
        if len(v) != n_layers:
            raise UnsupportedModelError(
                f"{g.architecture}.{key} lists {len(v)} values but the model has {n_layers} layers (block_count)")
        return [int(x) for x in v]
    return [int(v)] * n_layers


class Lfm2Model(QwenModel):
    QK_NORM = True
    final_norm = "token_embd_norm.weight"

    def __init__(self, dev, gguf, source, *, context_size=2048, chunk=64, on_progress=None):
        GPUModel.__init__(self, dev, gguf, source, context_size=context_size, chunk=chunk, on_progress=on_progress)
        a = self.args = Lfm2Args.from_gguf(gguf)
        self.vocab = a.vocab
        if self.final_norm not in gguf.tensors and "output_norm.weight" in gguf.tensors:
            self.final_norm = "output_norm.weight"        # tolerate converters that name the final norm so
        self.lm_head = "output.weight" if "output.weight" in gguf.tensors else "token_embd.weight"
        names = ["token_embd.weight", self.final_norm, self.lm_head]
        for i in range(a.n_layers):
            ops = ("attn_q", "attn_k", "attn_v", "attn_output") if a.attention[i] else \
                ("shortconv.in_proj", "shortconv.out_proj")
            for n in ("attn_norm",) + ops + ("ffn_norm", "ffn_gate", "ffn_up", "ffn_down"):
                name = f"blk.{i}.{n}.weight"
                if name not in gguf.tensors:
                    kind = "attention" if a.attention[i] else "short convolution"
                    raise UnsupportedModelError(
                        f"layer {i} ({kind}): the model file has no tensor {name!r}; the file does not match "
                        f"the lfm2 layout (re-convert it)")
                names.append(name)
            for n, shape in (("ffn_gate", (a.ffn, a.hidden)), ("ffn_up", (a.ffn, a.hidden)),
                             ("ffn_down", (a.hidden, a.ffn))):
                self.check_weight(f"blk.{i}.{n}.weight", *shape, f"feed-forward {a.ffn}, hidden {a.hidden}")
        self.plan_upload(names)

        T, dev, H = chunk, self.dev, a.hidden
        q_dim, kv_dim = a.heads * a.head_dim, a.kv_heads * a.head_dim
        self.qkv_dim = q_dim + 2 * kv_dim
        self.x = dev.create_buffer(4 * T * H, label="x")                     # [T, hidden] residual stream
        self.qkv = dev.create_buffer(4 * T * self.qkv_dim, label="qkv")      # [T, q | k | v] projections
        self.q = dev.create_buffer(4 * T * q_dim, label="q")                 # [T, heads * head_dim] after RoPE
        self.att = dev.create_buffer(4 * T * q_dim, label="att")             # [T, heads * head_dim]
        self.hid = dev.create_buffer(4 * T * a.ffn, label="hid")             # [T, ffn] silu(gate) * up
        self.bcx = dev.create_buffer(4 * T * 3 * H, label="bcx")             # [T, B | C | x] in_proj output
        self.conv_out = dev.create_buffer(4 * T * H, label="conv out")       # [T, hidden] C * conv(B * x)
        self.logits = dev.create_buffer(4 * a.vocab, label="logits")         # [vocab], last token only
        # per layer: KV cache [context, kv_dim] (attention) or conv taps [H, L] and state [L - 1, H] (conv)
        self._state_bytes = 4 * (a.l_cache - 1) * H     # one conv layer's state: [L - 1, hidden] floats
        # conv_snap: each conv layer's state after each decode step of a read (keep_state restores one of them)
        self.k_cache, self.v_cache, self.conv_w, self.conv_state, self.conv_snap = {}, {}, {}, {}, {}
        for i in range(a.n_layers):
            if a.attention[i]:
                self.k_cache[i] = dev.create_buffer(4 * context_size * kv_dim, label=f"k{i}")
                self.v_cache[i] = dev.create_buffer(4 * context_size * kv_dim, label=f"v{i}")
            else:
                self.conv_w[i] = self.f32_buffer(self.conv_taps(i), f"conv{i}")
                self.conv_state[i] = dev.create_buffer(self._state_bytes, label=f"conv state {i}")
                self.conv_snap[i] = dev.create_buffer(self._state_bytes * self.max_steps_per_read,
                                                      label=f"conv state {i} after each step")
                self.check_conv(i)
        freq = a.rope_theta ** (-np.arange(0, a.head_dim, 2, dtype=np.float64) / a.head_dim)
        self.freq = self.f32_buffer(freq.astype(np.float32), "rope freq")
        self.norms = {n: self.f32_buffer(self.vector(n), n) for n in names if n.endswith("norm.weight")}
        self.ones = self.f32_buffer(np.ones(max(H, a.ffn, q_dim, 2 * a.head_dim), np.float32), "ones")
        self.bias = self.f32_buffer(np.zeros(self.qkv_dim, np.float32), "no bias")
        self._zeros = np.zeros((a.l_cache - 1) * H, np.float32)
        self.build()
        self.reset_state()

    def attention_layers(self) -> list[int]:
        return [i for i in range(self.args.n_layers) if self.args.attention[i]]

    def conv_taps(self, i: int) -> np.ndarray:
        """The [hidden, L] taps of conv layer i, checked against hidden and shortconv.l_cache."""
        a, name = self.args, f"blk.{i}.shortconv.conv.weight"
        if name not in self.gguf.tensors:
            raise UnsupportedModelError(f"layer {i} (short convolution): the model file has no tensor {name!r}; "
                                        f"the file does not match the lfm2 layout (re-convert it)")
        shape = tuple(self.gguf.tensor(name).shape)
        if shape != (a.l_cache, a.hidden):
            raise UnsupportedModelError(
                f"layer {i} (short convolution): tensor {name!r} has shape {shape}, expected "
                f"({a.l_cache}, {a.hidden}) from lfm2.shortconv.l_cache = {a.l_cache} and the hidden size")
        return self.vector(name)

    def check_conv(self, i: int):
        a, p = self.args, f"blk.{i}.shortconv."
        for n, want in (("in_proj", (3 * a.hidden, a.hidden)), ("out_proj", (a.hidden, a.hidden))):
            got = self.shape(p + n + ".weight")
            if got != want:
                raise UnsupportedModelError(
                    f"layer {i} (short convolution): tensor {p + n + '.weight'!r} is {got[0]} x {got[1]} (rows x "
                    f"columns), expected {want[0]} x {want[1]} for hidden size {a.hidden}")

    # -- state -------------------------------------------------------------------------------------------------------
    def reset_state(self):
        """Clear every conv layer's rolling state (the start of a new sequence). KV caches need no clearing: a
        sequence only reads the rows it has written."""
        for buf in self.conv_state.values():
            self.dev.write_buffer(buf, self._zeros)

    def set_step(self, n_tokens: int, pos0: int, out_index: int = 0):
        if pos0 == 0:               # a pass at position 0 starts a new sequence: no conv history
            self.reset_state()
        super().set_step(n_tokens, pos0, out_index)

    # decode steps between readbacks: each step's conv state is kept (in conv_snap), so a run that stops inside a
    # read can be rewound to its last step (a chat's next turn then continues from it instead of starting over)
    max_steps_per_read = 32

    def step_copies(self, out_index: int) -> list:
        """After decode step out_index: every conv state into its slot out_index."""
        n = self._state_bytes
        return [(self.conv_state[i], 0, self.conv_snap[i], out_index * n, n) for i in self.conv_state]

    def keep_state(self, step: int) -> bool:
        """Restore the conv states kept after decode step ``step`` of the last read (-1: not kept: False)."""
        if step < 0:
            return False
        n = self._state_bytes
        self.dev.submit([], [(self.conv_snap[i], step * n, self.conv_state[i], 0, n) for i in self.conv_state])
        return True

    # -- plans -------------------------------------------------------------------------------------------------------
    def conv_block(self, rec, T, i):
        """x += Wout · (C ⊙ conv(B ⊙ x')), B | C | x' = Win · norm(x)."""
        a, p = self.args, f"blk.{i}."
        self.linear(rec, T, p + "shortconv.in_proj.weight", self.x, self.bcx, gain=self.norms[p + "attn_norm.weight"])
        rec.add(kernels.conv1d(a.hidden, a.l_cache), [self.bcx, self.conv_w[i], self.conv_state[i], self.conv_out,
                                                      self.step], (-(-a.hidden // 64), 1, 1), "conv1d")
        self.linear(rec, T, p + "shortconv.out_proj.weight", self.conv_out, self.x, accum=True)

    def record_body(self, T):
        a, rec = self.args, Recorder(self.dev)
        self.record_embed(rec, T)
        for i in range(a.n_layers):
            if a.attention[i]:
                self.attention_block(rec, T, i)
            else:
                self.conv_block(rec, T, i)
            self.ffn_block(rec, T, i)
        return rec.finish()
