"""Benchmark: prefill and decode speed of the engine, as one JSON object.

    python -m cera_web bench [--model PATH] [--prompt-tokens 512] [--decode-tokens 128]

Reports tokens/s, time to first token, host milliseconds per decoded token (time the host spends encoding and
submitting, not waiting for the GPU), and dispatches, submits and host→GPU API calls per decoded token. The browser
benchmark (tests/bench_browser.py) reports the same fields from the real page, where the API calls are Python→JS calls.
"""
from __future__ import annotations

import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from ..errors import CeraError

TEXT = ("The history of the city begins with a small settlement on the river, where traders met to exchange grain, "
        "salt and cloth. Over the centuries it grew into a market town, then a walled city with a cathedral, a "
        "university and a busy port. ")


def prompt_ids(tokenizer, n: int) -> list[int]:
    ids = []
    while len(ids) < n:
        ids += tokenizer.encode(TEXT, add_special=False)
    return ids[:n]


def _rate(x: float) -> float:
    """Tokens a second as printed: one decimal, three significant digits under 10 (a software adapter's 0.0757)."""
    return round(x, 1) if x >= 10 else float(f"{x:.3g}")


async def run(engine, prompt_tokens: int = 512, decode_tokens: int = 128, steps_per_read: int | None = None,
              repeats: int = 1, decode_after: int = 16, with_estimate: bool = True) -> dict:
    """steps_per_read: decode steps a readback; None (the default) lets the engine's ReadPacer choose, as the CLI
    and the page do ("steps_per_read": "auto" in the JSON, with the last read's count and the step time it saw).
    decode_after: the decode run's prompt length, so its tokens are at positions decode_after.. (16 by default, as
    llama-bench's tg runs near the start; a long one measures decoding late in a conversation). with_estimate: add
    the preflight's estimate for this engine and its micro-benchmark (estimate())."""
    dev = engine.dev
    ids = prompt_ids(engine.tokenizer, max(prompt_tokens, decode_after))
    decode_ids, ids = ids[:decode_after], ids[:prompt_tokens]
    engine.steps_per_read = steps_per_read
    await engine.generate(ids[:8], max_tokens=4, stop_at_eos=False)          # warm-up: pipelines, caches
    best, runs = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        pre = await engine.generate(ids, max_tokens=1, stop_at_eos=False, reuse_cache=False)   # prefill + 1st
        ttft = (time.perf_counter() - t0) * 1000
        c0 = (dev.calls, dev.dispatches, dev.submits)
        res = await engine.generate(decode_ids, max_tokens=decode_tokens + 1, stop_at_eos=False)
        steps = max(len(res.tokens) - 1, 1)
        calls, disp, subs = (b - a for a, b in zip(c0, (dev.calls, dev.dispatches, dev.submits)))
        row = {
            "prefill_tok_s": _rate(pre.prefill_tok_s),
            "ttft_ms": round(ttft, 2),
            "decode_tok_s": _rate(res.decode_tok_s),
            "host_ms_per_token": round(res.host_ms / steps, 4),
            # the decode run also prefilled its prompt (reusing the cache): that pass is counted too
            "dispatches_per_token": round(disp / (steps + 1), 1),
            "submits_per_token": round(subs / (steps + 1), 3),
            "api_calls_per_token": round(calls / (steps + 1), 2),
        }
        runs.append((row["prefill_tok_s"], row["decode_tok_s"]))
        if best is None or row["decode_tok_s"] > best["decode_tok_s"]:
            best = row
    return {
        "model": engine.name,
        "backend": engine.backend,
        "host": platform.node(),
        "prompt_tokens": len(ids),
        "decode_tokens": decode_tokens,
        "decode_after": decode_after,
        "kv_cache": getattr(engine.model, "kv_cache", "f32"),
        "steps_per_read": "auto" if steps_per_read is None else steps_per_read,
        **({"auto_steps_last": engine.pacer.last, "auto_step_ms": round(engine.pacer.step_ms or 0, 3)}
           if steps_per_read is None else {}),
        "chunk": engine.model.chunk,
        "i8_prefill": bool(getattr(engine.model, "i8_prefill", False)),        # prefill on 8-bit activations
        "subgroup_matrix": getattr(dev, "subgroup_matrix", None),     # the tensor cores (used with CERA_WEB_SGMAT=1)
        "first_tokens": list(res.tokens[:24]),      # the decode run's greedy tokens: compare kernels on one file
        **best,     # the repeat with the fastest decode
        "prefill_tok_s_runs": [r[0] for r in runs],     # every repeat, in order
        "decode_tok_s_runs": [r[1] for r in runs],
        **(await estimate(engine, len(ids), decode_after) if with_estimate else {}),
    }


# bench.chat_ttft's one-line user messages, one a run (each a new conversation)
CHAT_MESSAGES = ("What is the capital of France?", "Name three primary colours.", "How many legs does a spider have?",
                 "Suggest a name for a grey cat.")


async def chat_ttft(engine, repeats: int = 3, max_tokens: int = 8) -> dict:
    """Time to first token of a one-line chat message, as the page's chat sends it (ChatSession.send: the model's
    chat template, no system message, prefill, then the first token): from the call to the first token's callback.
    Each run is a new conversation with its own message, after another prompt has overwritten the KV cache (nothing
    reused). The first run is the first work after the load (call this before anything else, as the page's first
    message after its load), the others are warm. Fields: chat_ttft_ms (the first run), chat_ttft_warm_ms (the best
    of the others), chat_ttft_ms_runs, chat_prompt_tokens (the first message's), chat_template ("file", or "chatml"
    where the file has none and the engine falls back to ChatML)."""
    from ..session import ChatSession
    other = prompt_ids(engine.tokenizer, 48)
    runs, tokens = [], None
    for i in range(max(repeats, 1) + 1):
        message = CHAT_MESSAGES[i % len(CHAT_MESSAGES)]
        if i:       # the first run follows the load; later ones follow another prompt, so no prefix is cached
            await engine.generate(other, max_tokens=1, stop_at_eos=False, reuse_cache=False)
        chat = ChatSession(engine)
        ids = chat.prepare(message, max_tokens=max_tokens)[1]
        tokens = tokens or len(ids)
        first = []
        t0 = time.perf_counter()
        await chat.send(message, max_tokens=max_tokens,
                        on_token=lambda *a: first or first.append(time.perf_counter()))
        runs.append(round((first[0] - t0) * 1000, 2) if first else None)
    warm = [r for r in runs[1:] if r is not None]
    has_template = bool(engine.gguf.metadata.get("tokenizer.chat_template"))
    return {"chat_message": CHAT_MESSAGES[0], "chat_prompt_tokens": tokens, "chat_template": "file" if has_template
            else "chatml", "chat_ttft_ms": runs[0], "chat_ttft_warm_ms": min(warm) if warm else None,
            "chat_ttft_ms_runs": runs}


async def estimate(engine, prompt_tokens: int, decode_after: int) -> dict:
    """The preflight's estimate for this engine where it runs (cera_web.preflight: the micro-benchmark of its device,
    or of the CPU path, and the model's costs), beside the measured figures: {"estimate": {decode_tok_s,
    prefill_tok_s}, "microbench": {...}}."""
    from .. import preflight as pf
    spec = engine.plan.spec
    costs = pf.model_costs(engine.gguf, spec)
    bench = await (pf.cpu_microbench() if engine.cpu else pf.gpu_microbench(engine.dev))
    est = pf.estimate(spec, costs, "cpu" if engine.cpu else "webgpu", bench, engine.model.chunk,
                      position=decode_after + 64)
    return {"estimate": est, "microbench": bench}


EDIT_FUNCTION = "\n".join([
    "def summarize(records, key, threshold=0.0):",
    '    """Group records by key and report count, total, mean, min and max of their values."""',
    "    groups = {}",
    "    for record in records:",
    "        name = record.get(key)",
    "        if name is None:",
    "            continue",
    '        value = float(record.get("value", 0.0))',
    "        if value < threshold:",
    "            continue",
    "        groups.setdefault(name, []).append(value)",
    "    report = []",
    "    for name in sorted(groups):",
    "        values = groups[name]",
    "        total = sum(values)",
    "        count = len(values)",
    "        mean = total / count",
    "        low = min(values)",
    "        high = max(values)",
    "        spread = high - low",
    "        report.append({",
    '            "name": name,',
    '            "count": count,',
    '            "total": round(total, 3),',
    '            "mean": round(mean, 3),',
    '            "min": low,',
    '            "max": high,',
    '            "spread": round(spread, 3),',
    "        })",
    "    report.sort(key=lambda row: row[\"total\"], reverse=True)",
    "    lines = []",
    "    for row in report:",
    "        lines.append(",
    '            f"{row[\'name\']}: {row[\'count\']} records, total {row[\'total\']}, "',
    '            f"mean {row[\'mean\']}, range {row[\'min\']}..{row[\'max\']}"',
    "        )",
    '    header = f"{len(report)} groups of {len(records)} records"',
    "    lines.insert(0, header)",
    '    return "\\n".join(lines)',
    "",
])

# speculative decoding's tasks (bench.speculative): chat messages, greedy replies
SPECULATIVE_TASKS = {
    # prompt lookup's case: most of the reply is in the prompt
    "edit": "Rewrite this Python function so that it skips records whose value is negative, and change nothing "
            "else. Reply with the whole function in a code block.\n\n```python\n" + EDIT_FUNCTION + "```",
    # a draft model's case: code the model writes itself
    "code": "Write a Python function that parses a CSV file of (date, amount) rows and returns the total amount "
            "per month, with a docstring and type hints.",
    # plain prose: little to look up
    "prose": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    # an explanation: prose with some repeated terms
    "explain": "Explain how a hash table handles collisions, in three short paragraphs.",
    # an answer drawn from a given text (retrieval's case): some quoting
    "answer": "Using only the notes below, list the steps to rotate the server's TLS certificate.\n\nNotes: The "
              "certificate lives in /etc/app/tls/server.pem and its key in /etc/app/tls/server.key. To rotate it, "
              "first request a new certificate from the internal CA with `ca-cli request --host app01`. Copy the "
              "new files over the old ones, keeping the same file names and permissions (0600 for the key). Then "
              "reload the service with `systemctl reload app` (a restart drops open connections). Finally check "
              "the new expiry date with `openssl x509 -enddate -noout -in /etc/app/tls/server.pem`.",
}


async def speculative(engine, mode: str = "lookup", decode_tokens: int = 256, repeats: int = 2,
                      tasks: dict | None = None) -> dict:
    """Greedy decode speed of chat tasks (SPECULATIVE_TASKS) with speculative decoding (mode: "lookup", "draft" with
    engine.draft loaded, or "auto", the default) against without ("off"), the best of ``repeats`` each, in one process:
    tok/s of the decoded tokens (the first comes out of prefill), drafted and accepted tokens, and whether the two
    outputs are the same tokens (they must be); and what one verify pass costs against one decode step (verify_cost),
    and with a draft model its own step and catch-up (draft_cost: verify_cost of the draft)."""
    rows = {}
    await engine.generate([1, 2, 3, 4], max_tokens=4, stop_at_eos=False, speculative=mode)    # warm-up: pipelines
    await verify_cost(engine.model, repeats=1)          # the verify pass's own (the warm-up may not have drafted)
    cost = await verify_cost(engine.model)
    draft_cost = await verify_cost(engine.draft.model) if mode == "draft" and engine.draft else None
    for name, text in (tasks or SPECULATIVE_TASKS).items():
        ids = engine.encode_chat([{"role": "user", "content": text}])
        best = {}
        for _ in range(repeats):
            for m in ("off", mode):
                r = await engine.generate(ids, max_tokens=decode_tokens, reuse_cache=False, speculative=m)
                if m not in best or r.decode_tok_s > best[m].decode_tok_s:
                    best[m] = r
        off, on = best["off"], best[mode]
        rows[name] = {"prompt_tokens": len(ids), "tokens": len(on.tokens),
                      "decode_tok_s_off": round(off.decode_tok_s, 1), "decode_tok_s": round(on.decode_tok_s, 1),
                      "speedup": round(on.decode_tok_s / off.decode_tok_s, 3) if off.decode_tok_s else None,
                      "drafted": on.drafted, "accepted": on.accepted,
                      "acceptance": round(on.accepted / on.drafted, 3) if on.drafted else None,
                      "same_tokens": on.tokens == off.tokens}
    return {"model": engine.name, "backend": engine.backend, "host": platform.node(), "mode": mode,
            "draft": engine.draft.name if mode == "draft" and engine.draft else None,
            "decode_tokens": decode_tokens, "repeats": repeats, "verify_cost": cost, "draft_cost": draft_cost,
            "tasks": rows}


async def verify_cost(model, repeats: int = 20, pos: int = 64, budget_s: float = 3.0) -> dict:
    """Median ms of a verify pass of model.verify_rows tokens, of a one-token step and of a two-token prompt chunk at
    position pos, each with its read of the drawn tokens (what a speculative round, a plain round of one token and a
    draft model's catch-up after a round that kept every draft cost), and the decode steps a full verify pass costs.
    Each is run ``repeats`` times, or fewer (at least 3) once they took budget_s (the CPU model's passes take seconds),
    after a prompt of pos tokens (the CPU model runs only at positions it holds). The rows written there are overwritten
    by the next prompt."""
    n = model.verify_rows
    ids = [(7 + 31 * i) % model.spec.vocab for i in range(n)]
    before = [(3 + 17 * i) % model.spec.vocab for i in range(pos)]
    for a in range(0, pos, model.chunk):     # positions before pos, which every pass below goes back to
        model.prefill(before[a:a + model.chunk], a, with_head=False)

    async def median_ms(run, count):
        times = []
        while len(times) < repeats and (len(times) < 3 or sum(times) < budget_s * 1000):
            t0 = time.perf_counter()
            run()
            await model.read_log(count)
            times.append((time.perf_counter() - t0) * 1000)
        return sorted(times)[len(times) // 2]
    verify = round(await median_ms(lambda: model.verify(ids, pos), n), 3)
    step = round(await median_ms(lambda: model.prefill(ids[:1], pos, with_head=True), 1), 3)
    two = round(await median_ms(lambda: model.prefill(ids[:2], pos, with_head=True), 1), 3)
    return {"rows": n, "verify_ms": verify, "step_ms": step, "steps_a_verify": round(verify / step, 2),
            "two_tokens_ms": two}


async def prompt_cache(engine, prompt_tokens: int = 2000, new_tokens: int = 16, repeats: int = 3,
                       folder=None) -> dict:
    """Time to first token of a prompt whose first ``prompt_tokens`` (a long system prompt, a pasted document) were
    seen before and ``new_tokens`` are new (the next message): recomputed (the whole prompt prefilled) against
    restored (the snapshot of the shared part read from a file into the engine, then the new tokens prefilled:
    file read, checks, upload and prefill all timed), best of ``repeats``; the snapshot's bytes per token and the
    time to save it (read back from the GPU, packed, written). Between runs the engine's state is overwritten with
    another prompt, so nothing is reused but the file."""
    import os
    import tempfile
    from ..snapshot import read_header, write_bytes
    ids = prompt_ids(engine.tokenizer, prompt_tokens + new_tokens)
    shared, other = ids[:prompt_tokens], list(reversed(ids[:64]))
    path = os.path.join(folder or tempfile.gettempdir(), f"cera_web_bench_{os.getpid()}.snap")
    await engine.generate(ids[:8], max_tokens=2, stop_at_eos=False)         # warm-up: pipelines
    recompute, restore, save = [], [], []
    first = None
    try:
        for _ in range(repeats):
            await engine.generate(other, max_tokens=1, reuse_cache=False)
            t0 = time.perf_counter()
            full = await engine.generate(ids, max_tokens=1, stop_at_eos=False, reuse_cache=False)
            recompute.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            data = await engine.save_state(shared)
            if len(read_header(data)["tokens"]) < prompt_tokens:   # conv layers on a GPU: the state is kept only at
                await engine.generate(shared, max_tokens=1, reuse_cache=False)   # the end: the shared part alone
                t0 = time.perf_counter()
                data = await engine.save_state(shared)
            write_bytes(path, data)
            save.append((time.perf_counter() - t0) * 1000)
            await engine.generate(other, max_tokens=1, reuse_cache=False)     # the state is now another prompt's
            t0 = time.perf_counter()
            with open(path, "rb") as f:
                engine.restore_state(f.read())
            t1 = time.perf_counter()
            got = await engine.generate(ids, max_tokens=1, stop_at_eos=False)
            t2 = time.perf_counter()
            restore.append(((t2 - t0) * 1000, (t1 - t0) * 1000, (t2 - t1) * 1000))
            if got.tokens != full.tokens or got.cached_tokens < prompt_tokens - 1:
                raise CeraError(f"the restored run differs: {got.tokens} vs {full.tokens}, "
                                f"{got.cached_tokens} tokens cached")
            first = first or got
        size = os.path.getsize(path)
    finally:
        if os.path.exists(path):
            os.remove(path)
    return {
        "model": engine.name, "backend": engine.backend, "host": platform.node(),
        "kv_cache": engine.model.kv_cache, "context_size": engine.context_size,
        "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "cached_tokens": first.cached_tokens,
        # restored: the file read, checked and uploaded, then the new tokens prefilled (all on the critical path);
        # after_restore: the prefill alone (the page restores a conversation when it is shown, before a message)
        "ttft_recomputed_ms": round(min(recompute), 2), "ttft_restored_ms": round(min(r[0] for r in restore), 2),
        "speedup": round(min(recompute) / min(r[0] for r in restore), 2),
        "restore_ms": round(min(r[1] for r in restore), 2), "ttft_after_restore_ms": round(min(r[2] for r in restore), 2),
        "speedup_after_restore": round(min(recompute) / min(r[2] for r in restore), 2),
        "snapshot_bytes": size, "bytes_per_token": round(size / first.cached_tokens, 1),
        "save_ms": round(min(save), 2),
        "runs": {"recomputed_ms": [round(x, 2) for x in recompute],
                 "restored_ms": [[round(x, 2) for x in r] for r in restore], "save_ms": [round(x, 2) for x in save]},
    }


async def profile(engine, prompt_tokens: int = 512, repeats: int = 20) -> dict:
    """GPU milliseconds of each kind of dispatch in one decode step and one prefill chunk, at about position
    prompt_tokens (attention reads that many keys; the cache rows are the first chunk's then zeros): the plan's dispatches are
    grouped by what they compute (e.g. "attn_q", "attention", "ffn_down") and each group is submitted alone,
    ``repeats`` times, between two readbacks. Includes each dispatch's fixed cost, which is the point. Where the
    device has timestamp queries (native), each kind also gets ``gpu_us``: its dispatches' GPU time summed over the
    plan, each dispatch timed in its own pass (no submission cost)."""
    import re
    import time as _time
    model, dev = engine.model, engine.dev
    try:
        from ..gpu.native import NativeDevice, time_dispatches
        time_dispatches = time_dispatches if isinstance(dev, NativeDevice) else None
    except ImportError:     # Pyodide: no wgpu-py
        time_dispatches = None
    ids = prompt_ids(engine.tokenizer, prompt_tokens)
    await engine.generate(ids[:model.chunk], max_tokens=2, stop_at_eos=False)
    out = {}
    for name, plan, n_tokens in (("decode", model.plan_decode, 1), ("decode_head", model.plan_head_decode, 1),
                                 ("prefill_chunk", model.plan_prefill, model.chunk)):
        rec = plan.recorder
        groups = {}
        for d, label in zip(rec.dispatches, rec.labels):
            groups.setdefault(re.sub(r"^blk\.\d+\.|\.weight$", "", label) or "?", []).append(d)
        model.set_step(n_tokens, max(model.chunk, prompt_tokens - n_tokens), 0)   # a pass late in the prompt
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
        gpu_us = time_dispatches(dev, plan) if time_dispatches else None
        if gpu_us:     # GPU time from timestamps, each dispatch in its own pass (native devices with the feature)
            for d_label, us in zip(rec.labels, gpu_us):
                row = rows[re.sub(r"^blk\.\d+\.|\.weight$", "", d_label) or "?"]
                row["gpu_us"] = round(row.get("gpu_us", 0.0) + us, 2)
            out[name + "_gpu_total_us"] = round(sum(gpu_us), 1)
        out[name] = dict(sorted(rows.items(), key=lambda kv: -kv[1]["ms"]))
        out[name + "_total_ms"] = round(sum(r["ms"] for r in rows.values()), 3)
    return out


# Named shapes for --synthetic (the public configurations of these models; all tie the LM head to the embedding).
SHAPES = {
    "smollm2-135m": dict(arch="llama", layers=30, hidden=576, heads=9, kv_heads=3, ffn=1536, vocab=49152,
                         rope_theta=100000.0),
    "llama-3.2-1b": dict(arch="llama", layers=16, hidden=2048, heads=32, kv_heads=8, ffn=8192, vocab=128256,
                         rope_theta=500000.0),
    # Llama 3.1 8B's shape, tied here (the real one unties its head: ~0.3 GB more); ~4.6 GB as q4_k_m, past wasm32's
    # 4 GiB (the page's test of loading past it: tests/test_page_large.py)
    "llama-3.1-8b": dict(arch="llama", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                         rope_theta=500000.0),
    "qwen2.5-1.5b": dict(arch="qwen2", layers=28, hidden=1536, heads=12, kv_heads=2, ffn=8960, vocab=151936,
                         rope_theta=1000000.0),
    "qwen2.5-0.5b": dict(arch="qwen2", layers=24, hidden=896, heads=14, kv_heads=2, ffn=4864, vocab=151936,
                         rope_theta=1000000.0),
}
# --quant: tensor types of (embedding, Q/K/output/gate/up, V/down on llama.cpp's "more bits" layers, other V/down).
# q4_k_m follows llama.cpp's Q4_K_M: Q6_K for the (tied) embedding and for attn_v/ffn_down on the first and last
# eighth of the layers and every third layer between, Q4_K elsewhere.
QUANTS = {
    "q4_1": ("Q8_0", "Q4_1", "Q4_1", "Q4_1"),
    "q8_0": ("Q8_0", "Q8_0", "Q8_0", "Q8_0"),
    "q4_k_m": ("Q6_K", "Q4_K", "Q6_K", "Q4_K"),
    "f16": ("F16", "F16", "F16", "F16"),
}

K_FALLBACK = {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}     # for rows that are not a multiple of 256 (e.g. SmolLM2's 576)


def more_bits(i: int, layers: int) -> bool:
    """llama.cpp's use_more_bits(i, n) layer rule for Q4_K_M's attn_v / ffn_down."""
    return i < layers // 8 or i >= 7 * layers // 8 or (i - layers // 8) % 3 == 2


def random_weights(rng, type_name: str, rows: int, cols: int) -> np.ndarray:
    """Random packed weights of a type, rows x cols, as the file stores them (uint8 rows; float16 for F16), with
    scales set so that weights are about +-0.05: speed does not depend on the values, and this is fast even for
    billions of weights (no quantizer runs)."""
    if type_name == "F16":
        return (np.frombuffer(rng.bytes(rows * cols), np.int8).reshape(rows, cols) * (0.05 / 127)).astype(np.float16)
    from ..gguf import GGML_BLOCK, GGMLType
    elems, nbytes = GGML_BLOCK[GGMLType[type_name]]
    blocks = np.frombuffer(rng.bytes(rows * cols // elems * nbytes), np.uint8).reshape(-1, nbytes).copy()

    def f16(at, value):
        blocks[:, at:at + 2] = np.frombuffer(np.float16(value).tobytes(), np.uint8)
    if type_name == "Q4_1":        # {d, m, qs[16]}: d * q + m, q in 0..15
        f16(0, 0.0067), f16(2, -0.05)
    elif type_name == "Q8_0":      # {d, qs[32] int8}
        f16(0, 0.05 / 127)
    elif type_name == "Q5_0":      # {d, qh[4], qs[16]}: d * (q - 16), q in 0..31
        f16(0, 0.05 / 16)
    elif type_name == "Q4_K":      # {d, dmin, scales[12] (6-bit scale and min per 32), qs[128]}
        f16(0, 0.0002), f16(2, 0.0004)
    elif type_name == "Q6_K":      # {ql[128], qh[64], scales[16] int8, d}: d * scale * (q - 32)
        f16(208, 0.00001)
    else:
        raise ValueError(f"no random weights for {type_name}")
    return blocks.reshape(rows, -1)


def synthetic_llama(path, shape: str = "smollm2-135m", quant: str = "q4_1", *, seed=0, tokenizer=None, **overrides):
    """Write a random-weight GGUF with the named shape (SHAPES) and tensor types (QUANTS), F32 norms and a
    byte-level tokenizer padded to the vocabulary: for speed measurements where real files cannot travel. The
    default is SmolLM2-135M's exact shapes and types (Q4_1 projections, Q8_0 embedding). ``overrides`` replace
    entries of the shape (e.g. layers=2 for tests). tokenizer: {"tokens", "merges", "types", "eos"} to use a real
    vocabulary instead (the vocabulary size is then its). Needs the `gguf` package (the `bench` extra)."""
    try:
        import gguf
    except ImportError:
        raise CeraError("synthetic models are written with the gguf package, which is not installed: "
                        "pip install 'cera_web[bench]' (or pip install gguf)") from None

    if shape not in SHAPES:
        raise ValueError(f"unknown synthetic shape {shape!r}: choose one of {', '.join(SHAPES)}")
    if quant not in QUANTS:
        raise ValueError(f"unknown synthetic quantization {quant!r}: choose one of {', '.join(QUANTS)}")
    cfg = {**SHAPES[shape], **overrides}
    arch, layers, hidden, heads, kv_heads = cfg["arch"], cfg["layers"], cfg["hidden"], cfg["heads"], cfg["kv_heads"]
    ffn, vocab = cfg["ffn"], cfg["vocab"]
    embd_t, main_t, more_t, less_t = QUANTS[quant]
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"synthetic {shape} {quant}")
    w.add_block_count(layers)
    w.add_context_length(8192)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(cfg["rope_theta"])
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

    def add(name, rows, cols, type_name):
        if cols % 256 and type_name in K_FALLBACK:     # rows k-quants cannot hold (llama.cpp's fallback types)
            type_name = K_FALLBACK[type_name]
        data = random_weights(rng, type_name, rows, cols)
        if type_name == "F16":
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=gguf.GGMLQuantizationType[type_name])

    add("token_embd.weight", vocab, hidden, embd_t)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    hd = hidden // heads
    for i in range(layers):
        p = f"blk.{i}."
        vd_t = more_t if more_bits(i, layers) else less_t
        w.add_tensor(p + "attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(hidden, np.float32))
        add(p + "attn_q.weight", hidden, hidden, main_t)
        add(p + "attn_k.weight", kv_heads * hd, hidden, main_t)
        add(p + "attn_v.weight", kv_heads * hd, hidden, vd_t)
        if arch == "qwen2":      # Qwen2's Q/K/V biases
            for n, rows in (("q", hidden), ("k", kv_heads * hd), ("v", kv_heads * hd)):
                w.add_tensor(p + f"attn_{n}.bias", (rng.standard_normal(rows) * 0.02).astype(np.float32))
        add(p + "attn_output.weight", hidden, hidden, main_t)
        add(p + "ffn_gate.weight", ffn, hidden, main_t)
        add(p + "ffn_up.weight", ffn, hidden, main_t)
        add(p + "ffn_down.weight", hidden, ffn, vd_t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def synthetic_path(shape: str, quant: str) -> Path:
    """The synthetic file of this shape and quantization, written on first use into <temp>/cera_web_synthetic and
    kept between runs (the same name and seed always give the same file): a large shape takes a while to write."""
    if shape not in SHAPES or quant not in QUANTS:
        raise CeraError(f"--synthetic takes one of {', '.join(SHAPES)} and --quant one of {', '.join(QUANTS)}; "
                        f"got {shape!r} and {quant!r}")
    folder = Path(tempfile.gettempdir()) / "cera_web_synthetic"
    folder.mkdir(exist_ok=True)
    path = folder / f"v2-{shape}-{quant}.gguf"
    if not path.exists():
        part = path.with_suffix(".part")
        synthetic_llama(part, shape, quant)
        part.rename(path)
    return path


def synthetic_info(path) -> dict:
    """What a synthetic file holds, for the JSON: tensor types with their counts, and the parameter count."""
    from ..gguf import open_gguf
    g = open_gguf(str(path))
    types = {}
    for t in g.tensors.values():
        if len(t.shape) > 1:
            types[t.type.name] = types.get(t.type.name, 0) + 1
    params = sum(t.n_elements for t in g.tensors.values())
    return {"tensor_types": types, "params": params}
