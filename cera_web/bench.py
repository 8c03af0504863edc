"""Benchmark: prefill and decode speed of the engine, as one JSON object.

    python -m cera_web bench [--model PATH] [--prompt-tokens 512] [--decode-tokens 128]

Reports tokens/s, time to first token, host milliseconds per decoded token (time the host spends encoding and
submitting, not waiting for the GPU), and dispatches, submits and host→GPU API calls per decoded token. The browser
benchmark (tests/bench_browser.py) reports the same fields from the real page, where the API calls are Python→JS calls.
"""
from __future__ import annotations

import platform
import time

TEXT = ("The history of the city begins with a small settlement on the river, where traders met to exchange grain, "
        "salt and cloth. Over the centuries it grew into a market town, then a walled city with a cathedral, a "
        "university and a busy port. ")


def prompt_ids(tokenizer, n: int) -> list[int]:
    ids = []
    while len(ids) < n:
        ids += tokenizer.encode(TEXT, add_special=False)
    return ids[:n]


async def run(engine, prompt_tokens: int = 512, decode_tokens: int = 128, steps_per_read: int = 4,
              repeats: int = 1) -> dict:
    dev = engine.dev
    ids = prompt_ids(engine.tokenizer, prompt_tokens)
    engine.steps_per_read = steps_per_read
    await engine.generate(ids[:8], max_tokens=4, stop_at_eos=False)          # warm-up: pipelines, caches
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        pre = await engine.generate(ids, max_tokens=1, stop_at_eos=False)      # prefill + first token
        ttft = (time.perf_counter() - t0) * 1000
        c0 = (dev.calls, dev.dispatches, dev.submits)
        res = await engine.generate(ids[:16], max_tokens=decode_tokens + 1, stop_at_eos=False)
        steps = max(len(res.tokens) - 1, 1)
        calls, disp, subs = (b - a for a, b in zip(c0, (dev.calls, dev.dispatches, dev.submits)))
        row = {
            "prefill_tok_s": round(pre.prefill_tok_s, 1),
            "ttft_ms": round(ttft, 2),
            "decode_tok_s": round(res.decode_tok_s, 1),
            "host_ms_per_token": round(res.host_ms / steps, 4),
            # the decode run also prefilled 16 tokens: that pass is counted too (one submit, one plan)
            "dispatches_per_token": round(disp / (steps + 1), 1),
            "submits_per_token": round(subs / (steps + 1), 3),
            "api_calls_per_token": round(calls / (steps + 1), 2),
        }
        if best is None or row["decode_tok_s"] > best["decode_tok_s"]:
            best = row
    return {
        "model": engine.name,
        "backend": engine.backend,
        "host": platform.node(),
        "prompt_tokens": len(ids),
        "decode_tokens": decode_tokens,
        "steps_per_read": steps_per_read,
        "chunk": engine.model.chunk,
        **best,
    }


async def profile(engine, prompt_tokens: int = 512, repeats: int = 20) -> dict:
    """GPU milliseconds of each kind of dispatch in one decode step and one prefill chunk: the plan's dispatches are
    grouped by what they compute (e.g. "attn_q", "attention", "ffn_down") and each group is submitted alone,
    ``repeats`` times, between two readbacks. Includes each dispatch's fixed cost, which is the point."""
    import re
    import time as _time
    model, dev = engine.model, engine.dev
    ids = prompt_ids(engine.tokenizer, prompt_tokens)
    await engine.generate(ids[:model.chunk], max_tokens=2, stop_at_eos=False)
    out = {}
    for name, plan, n_tokens in (("decode", model.plan_decode, 1), ("decode_head", model.plan_head_decode, 1),
                                 ("prefill_chunk", model.plan_prefill, model.chunk)):
        rec = plan.recorder
        groups = {}
        for d, label in zip(rec.dispatches, rec.labels):
            groups.setdefault(re.sub(r"^blk\.\d+\.|\.weight$", "", label) or "?", []).append(d)
        model.set_step(n_tokens, model.chunk, 0)
        rows = {}
        for label, ds in groups.items():
            sub = dev.record(ds)
            dev.submit([sub])
            await dev.read(model.log, 0, 4)
            t0 = _time.perf_counter()
            for _ in range(repeats):
                dev.submit([sub])
            await dev.read(model.log, 0, 4)
            ms = (_time.perf_counter() - t0) * 1000 / repeats
            rows[label] = {"dispatches": len(ds), "ms": round(ms, 4), "us_per_dispatch": round(ms * 1000 / len(ds), 2)}
        out[name] = dict(sorted(rows.items(), key=lambda kv: -kv[1]["ms"]))
        out[name + "_total_ms"] = round(sum(r["ms"] for r in rows.values()), 3)
    return out


def synthetic_llama(path, *, layers=30, hidden=576, heads=9, kv_heads=3, ffn=1536, vocab=49152, seed=0,
                    tokenizer=None):
    """Write a random-weight llama GGUF with SmolLM2-135M's shapes and tensor types (Q4_1 projections, Q8_0
    embedding, F32 norms) and a byte-level tokenizer padded to the vocabulary: for speed measurements where the real
    file cannot travel. tokenizer: {"tokens", "merges", "types", "eos"} to use a real vocabulary instead (its size
    is then the vocabulary's). Needs the `gguf` package (a test dependency)."""
    import gguf
    import numpy as np

    from .quants import quantize_q4_1, quantize_q8_0
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("synthetic-llama")
    w.add_block_count(layers)
    w.add_context_length(8192)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(100000.0)
    byte_tokens = [bytes([b]).decode("latin-1") for b in range(256)]
    tok = tokenizer or {"tokens": byte_tokens + ["ab"] + [f"<t{i}>" for i in range(vocab - 257)],
                        "merges": ["a b"], "types": [1] * vocab, "eos": vocab - 1}
    vocab = len(tok["tokens"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tok["tokens"])
    w.add_token_merges(tok["merges"])
    w.add_token_types(tok["types"])
    w.add_eos_token_id(tok["eos"])

    def q(name, rows, cols, quant):
        data = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
        raw = quant(data)
        w.add_tensor(name, raw, raw_shape=raw.shape,
                     raw_dtype=gguf.GGMLQuantizationType.Q4_1 if quant is quantize_q4_1 else gguf.GGMLQuantizationType.Q8_0)

    q("token_embd.weight", vocab, hidden, quantize_q8_0)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    hd = hidden // heads
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(hidden, np.float32))
        q(p + "attn_q.weight", hidden, hidden, quantize_q4_1)
        q(p + "attn_k.weight", kv_heads * hd, hidden, quantize_q4_1)
        q(p + "attn_v.weight", kv_heads * hd, hidden, quantize_q4_1)
        q(p + "attn_output.weight", hidden, hidden, quantize_q4_1)
        q(p + "ffn_gate.weight", ffn, hidden, quantize_q4_1)
        q(p + "ffn_up.weight", ffn, hidden, quantize_q4_1)
        q(p + "ffn_down.weight", hidden, ffn, quantize_q4_1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
