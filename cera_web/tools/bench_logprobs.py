"""What the page's "Show token probabilities" costs: greedy decode without logprobs (the page's default path) against
the same decode with logprobs and the top 5 alternatives (logprobs.wgsl after the sampler, read back with the
tokens), plus the host time of webapp.token_probs (the per-token texts the page shows). JSON on stdout.

    python -m cera_web.tools.bench_logprobs [--model PATH] [--decode-tokens 128] [--runs 3]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time


async def bench(model: str, decode_tokens: int, runs: int) -> dict:
    from ..engine import Engine
    from ..webapp import token_probs
    engine = await Engine.load(model)
    try:
        ids = engine.encode_chat([{"role": "user", "content": "Write a long story about a cat."}])
        await engine.generate(ids, max_tokens=4, ignore_eos=True, top_logprobs=5)     # warm-up: both plans
        await engine.generate(ids, max_tokens=4, ignore_eos=True)
        out = {"model": engine.name, "backend": engine.backend, "prompt_tokens": len(ids),
               "decode_tokens": decode_tokens, "runs": runs}
        for label, extra in (("plain", {}), ("top_logprobs_5", {"top_logprobs": 5})):
            rates, view_ms = [], []
            for _ in range(runs):
                r = await engine.generate(ids, max_tokens=decode_tokens, ignore_eos=True, **extra)
                rates.append(r.decode_tok_s)
                if r.logprobs is not None:
                    t0 = time.perf_counter()
                    token_probs(r, engine.tokenizer)
                    view_ms.append((time.perf_counter() - t0) * 1000)
            out[label] = {"decode_tok_s": round(max(rates), 2), "decode_tok_s_runs": [round(x, 2) for x in rates]}
            if view_ms:
                out[label]["token_probs_ms"] = round(min(view_ms), 3)
        base = out["plain"]["decode_tok_s"]
        out["logprobs_vs_plain"] = round(out["top_logprobs_5"]["decode_tok_s"] / base, 3) if base else None
        return out
    finally:
        engine.close()


def main(argv=None):
    from .assets import default_model_path
    ap = argparse.ArgumentParser(prog="python -m cera_web.tools.bench_logprobs", description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="GGUF file (default: the default model)")
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args(argv)
    print(json.dumps(asyncio.run(bench(str(a.model or default_model_path()), a.decode_tokens, a.runs))))


if __name__ == "__main__":
    main()
