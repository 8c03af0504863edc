#!/bin/bash
# Issue 30 item 3 on the 2-core box: the page's engine (tests/bench_browser.py, headless Chromium) on each model with
# the backend the page's "auto" takes on SwiftShader, and the preflight's estimate it prints beside the measured rates;
# then per model predicted vs measured (h200_page_gpu.py predicted). Run in the repository root:
#   bash docs/bench/scripts/preflight_page.sh OUTDIR
# OUTDIR gets estimate.jsonl (one bench JSON a line, tagged) and predicted.json. The synthetic 1B is made by the native
# bench once (its temp folder) and served from .assets/models (serve.py serves any file there).
set -u
OUT=${1:?usage: preflight_page.sh OUTDIR}
mkdir -p $OUT
S=docs/bench/scripts/h200_page_gpu.py
B=".venv/bin/python tests/bench_browser.py"
SYN=v2-llama-3.2-1b-q4_k_m.gguf
[ -f .assets/models/$SYN ] || { .venv/bin/python -m cera_web bench --cpu --synthetic llama-3.2-1b --quant q4_k_m \
  --prompt-tokens 16 --decode-tokens 4 > /dev/null && cp /tmp/cera_web_synthetic/$SYN .assets/models/; }
run() {   # FILE BACKEND PROMPT DECODE
  timeout 1500 $B --backend $2 --model /models/$1 --prompt-tokens $3 --decode-tokens $4 > /tmp/pp.json 2>&1
  echo "$1 $2 rc=$?"; python3 $S tag "page-$2" $1 < /tmp/pp.json >> $OUT/estimate.jsonl
}
# the page's auto on SwiftShader: the CPU path where the float32 weights fit 1 GiB (SmolLM2, Gemma), else WebGPU
run SmolLM2-135M-Instruct.Q4_1.gguf cpu 128 64
run gemma-3-270m-Q4_K_M.gguf cpu 128 64
run qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf ${PP_QWEN_BACKEND:-webgpu} ${PP_QWEN_TOKENS:-8 4}
run $SYN ${PP_SYN_BACKEND:-webgpu} ${PP_SYN_TOKENS:-8 4}
python3 $S predicted $OUT/estimate.jsonl > $OUT/predicted.json; cat $OUT/predicted.json
