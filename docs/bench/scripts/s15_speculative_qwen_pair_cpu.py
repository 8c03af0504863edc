"""Run from the repository root: python docs/bench/scripts/s15_speculative_qwen_pair_cpu.py 64 > docs/bench/s15-speculative-qwen-pair-cpu.json
(lavapipe was too slow for the 1.5B on the 2-core box: no token in 16 minutes.)
bench.speculative (what `python -m cera_web bench --model M --draft D --decode-tokens 64` runs) on the CPU model,
cut to fit the box: the "code" task and the short edit prompt of tests/test_real_speculative.py (bench's "edit" task
pastes 378 tokens), repeats 1 (the CLI forces 2 and runs 3 tasks)."""
import asyncio, json, sys, time
sys.path.insert(0, 'tests')
from test_real_speculative import EDIT
from cera_web.engine import Engine
from cera_web.tools import assets, bench

async def main():
    t0 = time.time()
    eng = await Engine.load(assets.asset_path("qwen2.5-coder-1.5b"), device="cpu", cpu_fallback=False, context_size=2048)
    await eng.load_draft(assets.asset_path("qwen2.5-coder-0.5b"))
    out = await bench.speculative(eng, "draft", decode_tokens=int(sys.argv[1]), repeats=1,
                                  tasks={"code": bench.SPECULATIVE_TASKS["code"], "edit-short": EDIT})
    out["command"] = ("bench.speculative(engine, 'draft', decode_tokens=%s, repeats=1, tasks={'code': SPECULATIVE_TASKS['code'], 'edit-short': tests/test_real_speculative.EDIT}) on "
                      "Engine.load(qwen2.5-coder-1.5b, device='cpu') + load_draft(qwen2.5-coder-0.5b)" % sys.argv[1])
    out["wall_s"] = round(time.time() - t0, 1)
    eng.close()
    print(json.dumps(out))
asyncio.run(main())
