"""The GPU model of every architecture, built by composition from its ModelSpec (models/spec.py).

Per layer (``spec.layers[i]``):  x = x + op(norm(x)),   op = AttentionBlock or ConvBlock (spec.layers[i].kind)
                                 x = x + FFNBlock(norm(x))
then logits = Wout · norm(x) for the last token (Wout = the embedding table when the file ties them).

- AttentionBlock: Q/K/V in one projection (the norm fused in), optional Q/K/V biases and per-head Q/K RMSNorm, RoPE
  (interleaved pairs, or NEOX halves: spec.rope_neox) into the layer's KV cache, grouped-query attention, Wo with
  the residual add fused in. When decoding, RoPE, the cache store and attention are one dispatch (5 a layer); a
  verify pass (speculative decoding) runs the same kernels over its tokens (Transformer.by_steps).
- ConvBlock (LFM2): B | C | x' = Win · norm(x); y = C ⊙ conv(B ⊙ x') (causal depthwise, spec.l_cache taps, a rolling
  state of the last l_cache - 1 values of B ⊙ x' per layer: shaders/conv1d.wgsl); x += Wout · y.
- FFNBlock: x += Wdown · (silu(Wgate · norm(x)) * Wup · norm(x)), gate and up in one pass when they share a type;
  GeGLU (tanh GELU) instead of SwiGLU when spec.activation says so (Gemma).
- Gemma 3 (layer.post_norms): each block's output is RMS-normalised before its residual add (Wo / Wdown write a
  scratch row, then rmsnorm.wgsl with ACCUM adds it); sliding-window layers pass their window to both attention
  kernels; the embedding lookup multiplies by spec.embed_scale.

Activation buffers are allocated once, here, sized by the spec; each block owns only its weights and its state (KV
cache, conv state). A model with conv layers has a running state: a pass at position 0 clears it, and the state
after each decode step of a read is kept so a stop inside a read can be rewound (keep_state).
"""
from __future__ import annotations
from functools import partial

import numpy as np

from .. import kernels
from ..errors import UnsupportedModelError
from .base import GPUModel, Recorder
from .spec import KV_WIDTH, ModelSpec, not_implemented


class AttentionBlock:
    def __init__(self, m: "Transformer", i: int):
        s, layer, dev, p = m.spec, m.spec.layers[i], m.dev, f"blk.{i}."
        self.m, self.i, self.p = m, i, p
        self.heads, self.kv_heads = layer.heads, layer.kv_heads
        self.qkv_dim = (layer.heads + 2 * layer.kv_heads) * s.head_dim
        self.gain = m.norm(p + "attn_norm.weight")
        kv_dim = layer.kv_heads * s.head_dim        # KV cache: [context, kv_heads * head_dim] for K and for V
        width = KV_WIDTH[m.kv_cache]                # f32 or f16
        self.row_bytes = width * kv_dim             # one position's K (or V)
        self.k_cache = dev.create_buffer(width * m.context_size * kv_dim, label=f"k{i}")
        self.v_cache = dev.create_buffer(width * m.context_size * kv_dim, label=f"v{i}")
        self.bias = m.f32_buffer(np.concatenate([m.vector(p + f"attn_{n}.bias") for n in "qkv"]), p + "qkv bias") \
            if s.qkv_bias else m.zero_bias
        self.qk_gain = m.f32_buffer(np.concatenate([m.vector(p + f"attn_{n}_norm.weight") for n in "qk"]),
                                    p + "qk norm") if s.qk_norm else m.ones
        self.freq = m.rope_freq(layer.rope_theta)
        self.window = layer.sliding_window or 0
        self.post_gain = m.norm(p + "post_attention_norm.weight") if layer.post_norms else None
        # decode attention split over key ranges at long contexts, when its output feeds matvec_q8, which combines
        # the ranges as it loads its input (kernels.attention_split)
        o_rows, o_k = m.shape(p + "attn_output.weight")
        o_q8 = m.q8_shape(m.gguf.tensor(p + "attn_output.weight").type, o_k, o_rows) is not None
        self.split = kernels.attention_split(m.context_size, s.head_dim, m.tuning) if o_q8 else 1

    def record(self, rec, T: int):
        """x += Wo · attention(norm(x)): Q/K/V in one projection where they share a type (else neighbours that do,
        as Q and K of Q4_K_M files whose V is Q6_K), then RoPE into the cache."""
        m, s, p = self.m, self.m.spec, self.p
        col = 0
        for run, stacked in m.runs([p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]):
            rows = sum(m.shape(name)[0] for name in run)
            m.linear(rec, T, run[0], m.x, m.qkv, gain=self.gain, weight=stacked, rows=rows, ystride=self.qkv_dim,
                     yoff=col)
            col += rows
        H, KV, D = self.heads, self.kv_heads, s.head_dim
        if m.by_steps(T):
            # decode steps (RoPE, the cache store and attention in one dispatch) and verify passes (every token as a
            # decode step at its position computes it: the pass's cache rows stored first, then attention)
            attention = partial(kernels.attention_decode, H, KV, D, s.rope_neox, s.query_scale, s.qk_norm, s.eps,
                                self.window, m.kv16, self.split, keys_a_range=kernels.attention_range(m.tuning))
            groups = partial(kernels.attention_decode_groups, H, KV, D, self.split)
            buffers = [m.qkv, self.bias, self.qk_gain, self.freq, self.k_cache, self.v_cache]
            att = m.att if self.split == 1 else m.att_parts if T == 1 else m.verify_parts()
            if T == 1:
                rec.add(attention(), buffers + [att, m.step], groups(), "attention")
            else:
                rec.add(attention(mode="store"), buffers + [att, m.step], groups(tokens=T, mode="store"),
                        "attention store")
                rec.add(attention(mode="attend"), buffers + [att, m.step], groups(tokens=T), "attention")
            m.residual(rec, T, p + "attn_output.weight", att, self.post_gain, xsplit=(self.split, D))
            return
        rec.add(kernels.rope_store(H, KV, D, s.rope_neox, s.qk_norm, s.eps, m.kv16),
                [m.qkv, self.bias, self.qk_gain, self.freq, m.q, self.k_cache, self.v_cache, m.step],
                (H + 2 * KV, T, 1), "rope")
        rows = kernels.attention_tiled_rows(D, m.wg_memory, m.dev.is_cpu, m.dev.subgroup_size, m.tuning)
        if rows:                                                                  # register tiles on GPUs
            split = kernels.attention_prefill_split(H, KV, T, rows, m.tuning)
            out = m.att if split == 1 else m.scratch_buffer("sums", split * T * H * (D + 4) * 4)
            rec.add(kernels.attention_tiled(H, KV, D, s.query_scale, self.window, m.kv16, split, T, rows),
                    [m.q, self.k_cache, self.v_cache, out, m.step],
                    kernels.attention_tiled_groups(H, KV, T, split, rows), "attention")
            if split > 1:
                rec.add(kernels.attention_combine(H, D, split, T), [out, m.att, m.step],
                        kernels.attention_combine_groups(H, D, T), "attention")
        else:
            rec.add(kernels.attention(H, KV, D, s.query_scale, self.window, m.kv16),
                    [m.q, self.k_cache, self.v_cache, m.att, m.step], kernels.attention_groups(H, KV, D, T), "attention")
        m.residual(rec, T, p + "attn_output.weight", m.att, self.post_gain)


class ConvBlock:
    def __init__(self, m: "Transformer", i: int):
        s, dev, p = m.spec, m.dev, f"blk.{i}."
        self.m, self.i, self.p = m, i, p
        self.gain = m.norm(p + "attn_norm.weight")
        self.taps = m.f32_buffer(m.vector(p + "shortconv.conv.weight"), f"conv{i}")      # [hidden, L]
        self.state_bytes = 4 * (s.l_cache - 1) * s.hidden                                # [L - 1, hidden]
        self.state = dev.create_buffer(self.state_bytes, label=f"conv state {i}")
        # the state after each decode step of a read (keep_state restores one of them)
        self.snap = dev.create_buffer(self.state_bytes * m.max_steps_per_read, label=f"conv state {i} after each step")
        self.marked = dev.create_buffer(self.state_bytes, label=f"conv state {i} kept")   # Transformer.mark()

    def record(self, rec, T: int):
        """x += Wout · (C ⊙ conv(B ⊙ x')), B | C | x' = Win · norm(x)."""
        m, s, p = self.m, self.m.spec, self.p
        m.linear(rec, T, p + "shortconv.in_proj.weight", m.x, m.bcx, gain=self.gain)
        rec.add(kernels.conv1d(s.hidden, s.l_cache), [m.bcx, self.taps, self.state, m.conv_out, m.step],
                (-(-s.hidden // 64), 1, 1), "conv1d")
        m.linear(rec, T, p + "shortconv.out_proj.weight", m.conv_out, m.x, accum=True)


class FFNBlock:
    def __init__(self, m: "Transformer", i: int):
        self.m, self.p = m, f"blk.{i}."
        self.gain = m.norm(self.p + "ffn_norm.weight")
        self.post_gain = m.norm(self.p + "post_ffw_norm.weight") if m.spec.layers[i].post_norms else None
        self.gelu = m.spec.activation == "gelu_tanh"

    def record(self, rec, T: int):
        """x += Wdown · (act(Wgate · norm(x)) * Wup · norm(x)), act SiLU or GELU-tanh (spec.activation): gate and up
        in one pass when they share a type."""
        m, p, F = self.m, self.p, self.m.spec.ffn
        names = [p + "ffn_gate.weight", p + "ffn_up.weight"]
        stacked = m.stacked(names)
        if stacked is not None:
            m.linear(rec, T, names[0], m.x, m.hid, gain=self.gain, weight=stacked, glu=True, gelu=self.gelu)
        else:
            gate, up = m.scratch()
            m.linear(rec, T, names[0], m.x, gate, gain=self.gain)
            m.linear(rec, T, names[1], m.x, up, gain=self.gain)
            rec.add(kernels.swiglu(F, self.gelu), [gate, up, m.hid, m.step], (-(-F // 64), T, 1))
        m.residual(rec, T, p + "ffn_down.weight", m.hid, self.post_gain)


class Transformer(GPUModel):
    """The GPU model: embedding, spec.n_layers (op block, FFN block) pairs, final norm and head."""

    def __init__(self, dev, gguf, source, spec: ModelSpec, *, context_size: int = 2048, chunk: int = 64,
                 on_progress=None, kv_cache: str = "f32"):
        super().__init__(dev, gguf, source, spec, context_size=context_size, chunk=chunk, on_progress=on_progress,
                         kv_cache=kv_cache)
        s, T = spec, chunk
        for name in not_implemented(s):
            raise UnsupportedModelError(f"{s.arch}: the GPU model does not implement spec.{name} yet")
        self.plan_upload([t.name for t in s.tensors.values() if t.packed])
        conv = s.conv_layers()
        if conv:     # keep each decode step's conv state: fewer steps per read, the snapshots cost memory
            self.max_steps_per_read = 32
        # activations: allocated once, sized for a chunk of T tokens
        qkv_dim = max(((la.heads + 2 * la.kv_heads) * s.head_dim for la in s.layers if la.attention), default=0)
        q_dim = max((la.heads * s.head_dim for la in s.layers if la.attention), default=0)
        buf = dev.create_buffer
        self.x = buf(4 * T * s.hidden, label="x")                        # [T, hidden] residual stream
        self.hid = buf(4 * T * s.ffn, label="hid")                       # [T, ffn] silu(gate) * up
        self.logits = buf(4 * s.vocab, label="logits")                   # [vocab], last token only
        if q_dim:
            self.qkv = buf(4 * T * qkv_dim, label="qkv")                 # [T, q | k | v] projections
            self.q = buf(4 * T * q_dim, label="q")                       # [T, heads * head_dim] after RoPE
            self.att = buf(4 * T * q_dim, label="att")                   # [T, heads * head_dim]
        if any(la.post_norms for la in s.layers):
            self.out = buf(4 * T * s.hidden, label="block out")          # [T, hidden] before the post-norm
        # what the kernel choices know of the device (kernels.choose_product; self.tuning: GPUModel)
        self.adapter = kernels.Adapter.of(dev)
        self.wg_memory, self.max_threads = self.adapter.wg_memory, self.adapter.max_threads
        # prefill products on 8-bit activations (kernels.i8_prefill_enabled: GPUs with dot4I8Packed): one buffer of
        # activation blocks, reused by each product
        self.i8_prefill = kernels.i8_prefill_enabled(self.adapter, self.tuning) and T > 1
        self.xq = buf(kernels.Q8_BLOCK_BYTES * T * max(s.hidden, s.ffn, q_dim) // 32, label="xq") \
            if self.i8_prefill else None
        if conv:
            self.bcx = buf(4 * T * 3 * s.hidden, label="bcx")            # [T, B | C | x] in_proj output
            self.conv_out = buf(4 * T * s.hidden, label="conv out")      # [T, hidden] C * conv(B * x)
        self._norms, self._freqs, self._scratch, self._plan_all_logits, self._normed = {}, {}, None, None, {}
        self.verify_rows = min(self.VERIFY_ROWS, T)     # tokens a verify pass takes (Model.verify)
        self._plan_verify = self._verify_parts = self._short_body = None
        self._scratch_buffers, self._parts_made = {}, []
        self._argmax_pairs = None     # the two-stage argmax's (value, index) per slice, made on first use
        self.int8 = kernels.int8_enabled(self.adapter, self.tuning)   # decode products on 8-bit activations
        self.ones = self.f32_buffer(np.ones(max(s.hidden, s.ffn, q_dim, 2 * s.head_dim), np.float32), "ones")
        self.zero_bias = self.f32_buffer(np.zeros(max(qkv_dim, 1), np.float32), "no bias")
        self.final_gain = self.norm(s.final_norm)
        self.blocks = [((AttentionBlock if layer.attention else ConvBlock)(self, i), FFNBlock(self, i))
                       for i, layer in enumerate(s.layers)]
        self.conv_blocks = [op for op, _ in self.blocks if isinstance(op, ConvBlock)]
        # split decode attentions' partial results: [split, heads * head_dim] sums, [split, heads] (m, l, used, -)
        parts = max((16 * op.split * op.heads * (s.head_dim // 4 + 1) for op, _ in self.blocks
                     if isinstance(op, AttentionBlock) and op.split > 1), default=0)
        self.att_parts = buf(parts, label="attention parts") if parts else None
        self._zeros = np.zeros((s.l_cache - 1) * s.hidden, np.float32) if conv else None
        self.build()
        self.reset_state()

    # -- weights -------------------------------------------------------------------------------------------------
    def norm(self, name: str):
        """A norm gain as a float32 buffer (each once)."""
        if name not in self._norms:
            self._norms[name] = self.f32_buffer(self.vector(name), name)
        return self._norms[name]

    def rope_freq(self, theta: float):
        """[head_dim / 2] RoPE angular speeds for base theta (one buffer per base), with linear scaling and Llama
        3's per-frequency divisors (rope_freqs.weight) applied."""
        if theta not in self._freqs:
            s = self.spec
            freq = theta ** (-np.arange(0, s.head_dim, 2, dtype=np.float64) / s.head_dim) / s.rope_scale
            if s.rope_freqs:
                freq = freq / self.vector(s.rope_freqs)
            self._freqs[theta] = self.f32_buffer(freq.astype(np.float32), "rope freq")
        return self._freqs[theta]

    def scratch_buffer(self, role: str, nbytes: int):
        """The scratch buffer of a role, at least nbytes: "sums", the parts of split prefill attention
        (kernels.attention_prefill_split) and of K-split products (kernels.matmul_i8_split); "xh" and "wh", the f16
        copies of a product on subgroup matrices (its input, a slab of its weight's rows). Made on first use: a pass's
        dispatches run in order, so one buffer a role serves all; the largest request need not come first, so a
        larger one makes a larger buffer and the smaller ones stay (in _parts_made) bound to the dispatches recorded
        before it."""
        have = self._scratch_buffers.get(role)
        if have is None or have.size < nbytes:
            have = self._scratch_buffers[role] = self.dev.create_buffer(nbytes, label=f"scratch {role}")
            self._parts_made.append(have)
        return have

    def scratch(self):
        """Gate and up buffers for files whose gate and up weights differ in type (no stacked GLU pass)."""
        if self._scratch is None:
            n = 4 * self.chunk * self.spec.ffn
            self._scratch = (self.dev.create_buffer(n, label="gate"), self.dev.create_buffer(n, label="up"))
        return self._scratch

    def residual(self, rec, T, name, x, post_gain=None, **kw):
        """The residual add of a block's output projection: x += W[name] · x_in (fused into the projection), or with
        a post-norm gain (Gemma) x += rmsnorm(W[name] · x_in) * post_gain."""
        if post_gain is None:
            self.linear(rec, T, name, x, self.x, accum=True, **kw)
            return
        self.linear(rec, T, name, x, self.out, **kw)
        rec.add(kernels.rmsnorm(self.spec.hidden, self.spec.eps, accum=True), [self.out, post_gain, self.x, self.step],
                (T, 1, 1), "post-norm")

    def kv_buffers(self) -> list:
        return [b for op, _ in self.blocks if isinstance(op, AttentionBlock) for b in (op.k_cache, op.v_cache)]

    def linear(self, rec, T, name, x, y, *, gain=None, weight=None, rows=None, logits=None, **kw):
        """y (+)= W[name] · x for every token of a pass of up to T tokens, with the dispatches kernels.choose_product
        picks for the weight's type, shape and layout on this device.
        gain: a norm weight buffer (the input is RMS-normalised first); weight/rows: a stacked weight buffer and its
        row count; logits: the product's outputs are read back as logits (default: the LM head's are; see
        kernels.choose_product); kw: accum / glu / gelu / last_only / ystride / yoff (see matmul.wgsl), xsplit: x
        holds a split decode attention's partial results (matvec_q8 only; AttentionBlock checks that it applies)."""
        n, k = self.shape(name)
        n = rows or n
        # a weight too big for one binding is split into row ranges: one dispatch each, writing its rows' outputs
        pieces = [(weight, 0, n)] if weight is not None else self.pieces(name)
        plan = kernels.choose_product(self.gguf.tensor(name).type, n, k, T, self.adapter, self.tuning,
                                      parts=[(r0, rows_here) for _, r0, rows_here in pieces], each=self.by_steps(T),
                                      aligned=self.aligned(name), norm=gain is not None, eps=self.spec.eps,
                                      logits=name == self.spec.lm_head if logits is None else logits, **kw)
        roles = {"x": x, "y": y, "step": self.step, "gain": gain or self.ones, "ones": self.ones, "xq": self.xq}
        for d in plan:
            if d.what is not None:
                label = "norm" if d.what == "norm" else f"{name} {d.what}"
            else:
                label = name if len(pieces) == 1 else f"{name}[{pieces[d.part][1]}:{sum(pieces[d.part][1:])}]"
            if "normed" in d.buffers:
                roles["normed"] = self.normed_buffer(k)
            if d.part is not None:
                roles["w"] = pieces[d.part][0]
            if d.scratch:      # K parts (read by the next dispatch, sum_parts) or an f16 copy
                roles[d.scratch_role] = self.scratch_buffer(d.scratch_role, d.scratch)
            rec.add(d.wgsl(), [roles[r] for r in d.buffers], d.groups, label)

    def by_steps(self, T: int) -> bool:
        """Whether a pass recorded for T tokens computes each token as a decode step computes it (the decode kernels,
        their rounding): decode steps, and the verify passes of speculative decoding (T = verify_rows, below a
        prefill chunk; Transformer.verify), so that a verified token is the one plain decoding would draw."""
        return T == 1 or T == self.verify_rows < self.chunk

    def verify_parts(self):
        """A split decode attention's partial results for every token of a verify pass (made on first use)."""
        if self._verify_parts is None:
            self._verify_parts = self.dev.create_buffer(self.verify_rows * self.att_parts.size, label="verify parts")
        return self._verify_parts

    def normed_buffer(self, k: int):
        """The buffer of rmsnorm(x) * gain for a pass's rows of k, for CPU adapters (kernels.choose_product: there
        the norm fused into matmul.wgsl costs more than a separate pass; lavapipe, session 11: Q4_1 SwiGLU 1536x576
        with its norm 21.6 -> 8.8 ms a token, 200 -> 94 ms for 16 tokens); one per k, made on first use."""
        if k not in self._normed:
            self._normed[k] = self.dev.create_buffer(4 * self.chunk * k, label="normed input")
        return self._normed[k]

    def q8_shape(self, fmt, k: int, rows: int, aligned: bool = False) -> dict | None:
        """matvec_q8's shape for a one-token product of `rows` rows of k of type fmt (aligned: in the aligned
        layout), or None where it is not used (int8 off, or kernels.matvec_q8_shape says no)."""
        if not self.int8:
            return None
        return kernels.matvec_q8_shape(fmt, k, self.dev.is_cpu, self.dev.subgroup_size, self.wg_memory, rows,
                                       aligned, self.tuning)

    # -- plans ---------------------------------------------------------------------------------------------------
    def record_body(self, T):
        rec = Recorder(self.dev)
        self.record_embed(rec, T)
        for op, ffn in self.blocks:
            op.record(rec, T)
            ffn.record(rec, T)
        return rec.finish()

    def record_head(self, T):
        rec = Recorder(self.dev)
        self.linear(rec, T, self.spec.lm_head, self.x, self.logits, gain=self.final_gain, last_only=True)
        self.record_argmax(rec)
        return rec.finish()

    def record_argmax(self, rec):
        """Greedy token = argmax of the logits, into tokens[0] and the log: in two stages for large vocabularies
        (each workgroup the best of a slice, then the best of those)."""
        V = self.spec.vocab
        parts = kernels.argmax_parts_count(V, self.tuning)
        if parts == 1:
            rec.add(kernels.argmax(V), [self.logits, self.tokens, self.log, self.step], (1, 1, 1), "argmax")
            return
        if self._argmax_pairs is None:
            self._argmax_pairs = self.dev.create_buffer(8 * parts, label="argmax pairs")
        rec.add(kernels.argmax_parts(V), [self.logits, self._argmax_pairs], (parts, 1, 1), "argmax")
        rec.add(kernels.argmax(parts, pairs=True), [self._argmax_pairs, self.tokens, self.log, self.step], (1, 1, 1),
                "argmax")

    VERIFY_ROWS = 16      # tokens a verify pass takes at most: the last drawn token and up to 15 drafts

    def short_body(self):
        """The body of a pass of 2..verify_rows tokens, recorded on first use: the decode kernels over verify_rows
        tokens (by_steps), for verify passes and, on GPUs, prompt chunks that short (body_for). The prefill plan's
        dispatches are sized for a whole chunk: on the H200 a 2..16-token pass through it took 24.7 ms at the 1.5B
        shape (11 decode steps), a body of prefill kernels recorded for 16 tokens 16 ms (session 16), this body 3.1 to
        3.4 decode steps for 16 tokens (verify_cost, session 20), fewer for fewer tokens (workgroups of tokens past
        the pass return at once). A draft model catches up with the 2 tokens of a round that kept every draft so."""
        if self._short_body is None:
            T = self.verify_rows
            self._short_body = self.record_body(T) if T < self.chunk else self.plan_prefill
        return self._short_body

    def body_for(self, n: int):
        """The body plan of a prompt chunk of n tokens: the decode plan for one, short_body() for up to verify_rows
        on GPUs that are not CPU adapters (there the prefill kernels take a few tokens at less than a step each),
        else the prefill plan."""
        if n == 1:
            return self.plan_decode
        return self.short_body() if n <= self.verify_rows < self.chunk and not self.dev.is_cpu else self.plan_prefill

    def verify(self, ids, pos0: int) -> None:
        """Submit a pass over ids (2 <= len(ids) <= verify_rows) at positions pos0..., drawing the token after each
        of its tokens into log slots 0..len(ids)-1 (speculative decoding checks drafts with it). The body is recorded
        for verify_rows tokens with the decode kernels (by_steps): where decode products run on 8-bit activations
        (matvec_q8), each row's logits are a decode step's bit for bit, so a kept draft is the token plain decoding
        draws, near-ties included; elsewhere the products are the prefill ones (a rounding apart). With a sampler_plan
        each row is then drawn by it in turn, as a decode step at that position would draw it (its random number; the
        penalties' ring, which the draw of row i extends before row i + 1 reads it: right whenever row i + 1's draw is
        used)."""
        V, n = self.spec.vocab, len(ids)
        if self._plan_verify is None:       # recorded on first use (Engine.warm_up on GPUs)
            T = self.verify_rows
            self.verify_logits = self.dev.create_buffer(4 * T * V, label="verify logits")
            rec = Recorder(self.dev)
            self.linear(rec, T, self.spec.lm_head, self.x, self.verify_logits, gain=self.final_gain, logits=False)
            head = rec.finish()
            rec = Recorder(self.dev)
            rec.add(kernels.argmax(V, rows=True), [self.verify_logits, self.tokens, self.log, self.step], (T, 1, 1),
                    "argmax")
            self._plan_verify = (head, rec.finish())
        head, argmax = self._plan_verify
        self.dev.write_buffer(self.tokens, np.asarray(ids, np.uint32))
        self.set_step(n, pos0, 0)
        if self.sampler_plan is None:
            self.dev.submit([self.short_body(), head, argmax], early=True)
            return
        row = lambda i: [(self.verify_logits, 4 * V * i, self.logits, 0, 4 * V)] if i < n else []    # noqa: E731
        self.dev.submit([self.short_body(), head], row(0), early=True)
        for i in range(n):          # the sampler reads the logits buffer: each row is copied there in turn
            self.set_step(1, pos0 + i, i)
            self.dev.submit([self.sampler_plan], row(i + 1))

    async def chunk_logits(self, ids, pos0: int) -> np.ndarray:
        """Run one prompt chunk (len(ids) <= chunk) at positions pos0... like prefill, and return the logits at each
        of its positions, [len(ids), vocab] float32 (position pos0 + t predicts the token after ids[t])."""
        V = self.spec.vocab
        if self._plan_all_logits is None:     # recorded on first use: most sessions never need it
            self.all_logits = self.dev.create_buffer(4 * self.chunk * V, label="all logits")
            rec = Recorder(self.dev)
            self.linear(rec, self.chunk, self.spec.lm_head, self.x, self.all_logits, gain=self.final_gain)
            self._plan_all_logits = rec.finish()
        self.dev.write_buffer(self.tokens, np.asarray(ids, np.uint32))
        self.set_step(len(ids), pos0, 0)
        self.dev.submit([self.plan_prefill, self._plan_all_logits], early=True)
        raw = await self.dev.read(self.all_logits, 0, 4 * len(ids) * V)
        return np.frombuffer(raw, np.float32).reshape(len(ids), V).copy()

    # -- running state (conv layers) -----------------------------------------------------------------------------
    def reset_state(self):
        """Clear every conv layer's rolling state (the start of a new sequence). KV caches need no clearing: a
        sequence only reads the rows it has written."""
        for b in self.conv_blocks:
            self.dev.write_buffer(b.state, self._zeros)

    def set_step(self, n_tokens: int, pos0: int, out_index: int = 0):
        if pos0 == 0 and self.conv_blocks:     # a pass at position 0 starts a new sequence: no conv history
            self.reset_state()
        super().set_step(n_tokens, pos0, out_index)

    def step_copies(self, out_index: int) -> list:
        """After decode step out_index of a read: every conv state into its slot out_index."""
        return [(b.state, 0, b.snap, out_index * b.state_bytes, b.state_bytes) for b in self.conv_blocks]

    # -- the sequence state as bytes (Model.state_sizes; cera_web.snapshot) ---------------------------------------
    READ_PIECE = 8 << 20        # bytes a state read maps at once (the browser keeps a staging buffer that large)

    def state_sizes(self, n: int) -> list[int]:
        return [size for op, _ in self.blocks
                for size in ((n * op.row_bytes,) * 2 if isinstance(op, AttentionBlock) else (op.state_bytes,))]

    def _state_buffers(self, at_mark: bool = False) -> list:
        return [b for op, _ in self.blocks for b in ((op.k_cache, op.v_cache) if isinstance(op, AttentionBlock)
                                                     else (op.marked if at_mark else op.state,))]

    async def read_state(self, n: int, at_mark: bool = False) -> list[bytes]:
        parts = []
        for buf, size in zip(self._state_buffers(at_mark), self.state_sizes(n)):
            pieces = [await self.dev.read(buf, at, min(self.READ_PIECE, size - at))
                      for at in range(0, size, self.READ_PIECE)]
            parts.append(b"".join(pieces))
        return parts

    def write_state(self, parts: list, n: int) -> None:
        for buf, data in zip(self._state_buffers(), parts):
            self.dev.write_buffer(buf, data)
        self.mark()

    def mark(self) -> None:
        if self.conv_blocks:
            self.dev.submit([], [(b.state, 0, b.marked, 0, b.state_bytes) for b in self.conv_blocks])

    def restore_mark(self) -> None:
        if self.conv_blocks:
            self.dev.submit([], [(b.marked, 0, b.state, 0, b.state_bytes) for b in self.conv_blocks])

    def keep_state(self, step: int) -> bool:
        """The engine ran decode steps past a stop: keep the state as it was after decode step ``step`` of the last
        read (-1: before the first). Attention needs nothing (later cache rows are simply overwritten); conv states
        are restored from their snapshots (-1: not kept: False)."""
        if not self.conv_blocks:
            return True
        if step < 0:
            return False
        self.dev.submit([], [(b.snap, step * b.state_bytes, b.state, 0, b.state_bytes) for b in self.conv_blocks])
        return True
