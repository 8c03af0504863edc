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
