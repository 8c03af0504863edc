"""Predicted against measured for the preflight's raw page runs (issue 30 item 3), one JSON object on stdout.

    .venv/bin/python docs/bench/scripts/preflight_table.py docs/bench/preflight-s16-page-*.json

For each raw bench JSON (tests/bench_browser.py's output: measured rates, the micro-benchmark the same process ran, and
the estimate its code printed), the estimate of the code here recomputed from that micro-benchmark (the constants may
have been fitted since), the measured rates (decode also from the pacer's step time, prefill also from the time to
first token, used for runs under 1 tok/s, which the bench printed with one decimal before 505bce4), the error
(predicted / measured - 1) and whether it is within ±35% of the measured."""
import json
import sys
from pathlib import Path

from cera_web import preflight as pf
from cera_web.gguf import open_gguf
from cera_web.models.spec import model_spec

ROOT = Path(__file__).resolve().parents[3]
FILES = {"smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma": "gemma-3-270m-Q4_K_M.gguf",
         "qwen": "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf", "synthetic": "v2-llama-3.2-1b-q4_k_m.gguf"}

rows = []
for raw in sys.argv[1:]:
    d = json.loads(Path(raw).read_text().splitlines()[-1])
    file = next(f for k, f in FILES.items() if d["model"].lower().startswith(k))
    g = open_gguf(ROOT / ".assets" / "models" / file)
    spec = model_spec(g)
    cpu = "numpy" in d["microbench"]
    est = pf.estimate(spec, pf.model_costs(g, spec), "cpu" if cpu else "webgpu", d["microbench"], d["chunk"],
                      position=d["decode_after"] + 64)
    measured = {"decode_tok_s": d["decode_tok_s"], "prefill_tok_s": d["prefill_tok_s"],
                "decode_from_step_ms": round(1000 / d["auto_step_ms"], 4),
                "prefill_from_ttft": round(d["prompt_tokens"] / d["ttft_ms"] * 1000, 4)}
    dec = d["decode_tok_s"] if d["decode_tok_s"] >= 1 else measured["decode_from_step_ms"]   # rounding of slow runs
    pre = d["prefill_tok_s"] if d["prefill_tok_s"] >= 1 else measured["prefill_from_ttft"]
    rows.append({"raw": raw, "file": file, "backend": d["backend"], "tokens": [d["prompt_tokens"], d["decode_tokens"]],
                 "printed_estimate": d.get("estimate"), "predicted": est, "measured": measured,
                 "decode": {"measured": dec, "predicted": est["decode_tok_s"],
                            "error": round(est["decode_tok_s"] / dec - 1, 3),
                            "within_35": abs(est["decode_tok_s"] - dec) <= 0.35 * dec},
                 "prefill": {"measured": pre, "predicted": est["prefill_tok_s"],
                             "error": round(est["prefill_tok_s"] / pre - 1, 3),
                             "within_35": abs(est["prefill_tok_s"] - pre) <= 0.35 * pre}})
print(json.dumps({"constants": {k: getattr(pf, k) for k in dir(pf) if k.endswith(("_FACTOR", "_EFFICIENCY", "_CHAIN"))},
                  "rows": rows}, indent=1))
