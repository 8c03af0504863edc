"""Session 15 (issue 31): what a verify pass of T tokens costs against a decode step, per model shape — the cost
model of speculative decoding on this GPU (a round of k drafts pays off when the tokens it keeps, a + 1, take
longer as plain steps than the draft's work plus one verify of k + 1 tokens).

    python3 docs/bench/scripts/h200_s15_verify_cost.py MODEL

Times (ms, best of 20) of: one decode step in a pipelined batch (the engine's plain decode: 128 tokens, / 128), one
decode step read back alone, and Model.verify of T = 2, 4, 8, 12, 16 tokens read back. One JSON object."""
import asyncio
import json
import sys
import time

from cera_web.engine import Engine


async def main(path):
    eng = await Engine.load(path, context_size=2048)
    m = eng.model
    ids = [(7 * i) % min(m.vocab, 1000) for i in range(512)]
    r = await eng.generate(ids, max_tokens=129, ignore_eos=True, speculative="off", reuse_cache=False)
    out = {"model": eng.name, "backend": eng.backend, "decode_ms_pipelined": round(1000 / r.decode_tok_s, 4)}
    pos = len(ids)

    async def best(fn, n=20):
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            await fn()
            times.append((time.perf_counter() - t0) * 1000)
        return round(min(times), 4)

    async def one_step():
        m.decode(pos, 0)
        await m.read_log(1)
    out["decode_ms_read_alone"] = await best(one_step)
    for T in (2, 4, 8, 12, 16):
        async def verify():
            m.verify(ids[:T], pos)
            await m.read_log(T)
        out[f"verify_ms_T{T}"] = await best(verify)
    print(json.dumps(out))
    eng.close()


asyncio.run(main(sys.argv[1]))
