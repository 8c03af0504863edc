"""Session 16 (issue 31): where a verify pass's time goes. Loads MODEL, runs one verify of T = 16 tokens, then
times each dispatch of its body, head and argmax plans with timestamp queries (native.time_dispatches), grouped
by label as bench --profile groups them, and the host's time to submit a verify and read it back.

    python3 docs/bench/scripts/h200_s16_verify_profile.py MODEL"""
import asyncio
import json
import re
import sys
import time

from cera_web.engine import Engine
from cera_web.gpu.native import time_dispatches


async def main(path):
    eng = await Engine.load(path, context_size=2048)
    m = eng.model
    ids = [(7 * i) % min(m.vocab, 1000) for i in range(512)]
    await eng.generate(ids, max_tokens=2, ignore_eos=True, speculative="off", reuse_cache=False)
    pos = len(ids)
    m.verify(ids[:16], pos)
    await m.read_log(16)
    host = []
    for _ in range(10):
        t0 = time.perf_counter()
        m.verify(ids[:16], pos)
        t1 = time.perf_counter()
        await m.read_log(16)
        host.append(((t1 - t0) * 1000, (time.perf_counter() - t0) * 1000))
    out = {"model": eng.name, "backend": eng.backend, "chunk": m.chunk, "verify_rows": m.verify_rows,
           "submit_ms_min": round(min(h[0] for h in host), 3), "verify_ms_min": round(min(h[1] for h in host), 3)}
    head, argmax = m._plan_verify
    m.set_step(16, pos, 0)
    for name, plan in (("body", m._verify_body), ("head", head), ("argmax", argmax), ("decode", m.plan_decode)):
        us = time_dispatches(m.dev, plan) or []
        rec = plan.recorder
        groups = {}
        for label, t in zip(rec.labels, us):
            key = re.sub(r"^blk\.\d+\.|\.weight$", "", label) or "?"
            groups[key] = round(groups.get(key, 0.0) + t, 2)
        out[name] = dict(sorted(groups.items(), key=lambda kv: -kv[1]))
        out[name + "_total_us"] = round(sum(us), 1)
        out[name + "_dispatches"] = len(us)
    print(json.dumps(out))
    eng.close()


asyncio.run(main(sys.argv[1]))
