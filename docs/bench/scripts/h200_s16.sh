#!/bin/bash
# Session 16 on the H200, one machine start, calls in a row (each within the machine's 30 s idle time):
#   h200_s16.sh stash      carry [".spec/smol.00"], then [".spec/smol.01"]   (SmolLM2-135M-Instruct Q4_1 in pieces:
#                          `split -b 33000000 -d .assets/models/SmolLM2-135M-Instruct.Q4_1.gguf .spec/smol.`)
#   h200_s16.sh attention  carry [".spec/smol.02", ".gl", ".whl", ".before"]
#   h200_s16.sh spec       carry [".spec/smol.02", ".gl", ".whl"]
# attention (issue 25): the one tiled-attention body (".") against the code before it (.before: `git archive 31c1dc5
#   cera_web shaders`): the kernel tests of attention on the NVIDIA adapter, bench_kernels --attention at 512 tokens
#   after 0 and 3,584 cached (heads 32:8 and 9:3 of 64, 12:2 of 128), and prefill end to end at 4,000 and 512 tokens
#   (synthetic Llama-3.2-1B Q4_1, heads of 64; Qwen2.5-1.5B Q4_K_M, heads of 128), before/after alternating, 2 rounds.
# spec (issue 31): the speculative tests on the NVIDIA adapter; the verify pass's cost (h200_s15_verify_cost.py) at
#   the 1.5B and 0.5B shapes and on SmolLM2, and bench --lookup on SmolLM2 (edit / code / prose, plain against lookup,
#   best of 3), each with small passes through matmul.wgsl (the default since 2f7840f) and without (SMALL_PASS=0).
set -o pipefail
mkdir -p /tmp/spec && cp .spec/smol.* /tmp/spec/ 2>/dev/null; ls /tmp/spec
[ "$1" = stash ] && exit 0
. docs/bench/scripts/h200_setup_main.sh
T0=$(date +%s)
t() { echo "== t=$(( $(date +%s) - T0 ))s $*"; }
if [ ! -f /tmp/smol.gguf ]; then cat /tmp/spec/smol.0* > /tmp/smol.gguf; sha256sum /tmp/smol.gguf; fi
gen() { timeout 200 python3 -m cera_web bench --synthetic $1 --quant $2 --prompt-tokens 16 --decode-tokens 4 >/dev/null \
          || echo "FAIL gen $1 $2"; }
if [ "$1" = attention ]; then
  python3 -m pytest tests/test_kernels.py -q -p no:cacheprovider -k attention 2>&1 | tee $OUT/h200-s16-pytest-attention.txt | tail -2
  t tests
  gen llama-3.2-1b q4_1; gen qwen2.5-1.5b q4_k_m; t generated
  for code in before after; do
    d=.; [ $code = before ] && d=.before
    for a in "32:8,9:3 --pos0 0" "32:8,9:3 --pos0 3584" "12:2 --head-dim 128 --pos0 0" "12:2 --head-dim 128 --pos0 3584"; do
      r=$(cd $d && PYTHONPATH=/tmp/site:$PWD timeout 60 python3 -m cera_web.tools.bench_kernels --gemm 512 --attention $a) \
        && echo "{\"code\": \"$code\", \"args\": \"$a\", \"run\": $r}" >> $OUT/h200-s16-attention-kernels.jsonl
    done
  done
  t kernels
  for round in 1 2; do
    for code in before after; do
      d=.; [ $code = before ] && d=.before
      for m in "llama-3.2-1b q4_1" "qwen2.5-1.5b q4_k_m"; do
        set -- $m
        for p in 4000 512; do
          r=$(cd $d && PYTHONPATH=/tmp/site:$PWD timeout 60 python3 -m cera_web bench --synthetic $1 --quant $2 \
                --prompt-tokens $p --decode-tokens 16 --context 4096 --repeats 2) || { echo "FAIL $code $1 $p"; continue; }
          echo "{\"code\": \"$code\", \"model\": \"$1\", \"prompt\": $p, \"run\": $r}" >> $OUT/h200-s16-attention-e2e.jsonl
          echo "$code $1 $p $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print('prefill', d['prefill_tok_s_runs'], 'decode', d['decode_tok_s'])") t=$(( $(date +%s) - T0 ))"
        done
      done
    done
  done
  exit 0
fi
test "$1" = spec || { echo "usage: h200_s16.sh stash | attention | spec"; exit 2; }
# spec: small passes through matmul.wgsl (2f7840f; the default) against the prefill kernels (CERA_WEB_SMALL_PASS=0)
python3 -m pytest tests/test_speculative.py tests/test_choose_product.py -q -p no:cacheprovider 2>&1 \
  | tee $OUT/h200-s16-pytest-speculative.txt | tail -2
t tests
gen qwen2.5-0.5b q4_k_m; gen qwen2.5-1.5b q4_k_m; t generated
S=/tmp/cera_web_synthetic
for f in $S/v2-qwen2.5-1.5b-q4_k_m.gguf $S/v2-qwen2.5-0.5b-q4_k_m.gguf /tmp/smol.gguf; do
  for sp in 16 0; do
    echo "{\"small_pass\": $sp, \"run\": $(CERA_WEB_SMALL_PASS=$sp timeout 120 python3 docs/bench/scripts/h200_s15_verify_cost.py $f)}" \
      | tee -a $OUT/h200-s16-verify-cost-small-pass.jsonl
  done
done
t verify
for sp in 16 0; do
  CERA_WEB_SMALL_PASS=$sp timeout 240 python3 -m cera_web bench --model /tmp/smol.gguf --lookup --decode-tokens 256 \
    --repeats 3 --context 2048 | tee $OUT/h200-s16-speculative-lookup-smollm2-small-pass-$sp.json
  t lookup $sp
done
