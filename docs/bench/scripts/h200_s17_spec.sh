#!/bin/bash
# Session 17 on the H200 (issue 31): the verify pass built from the decode kernels (59daf01) against the one before
# it (.before: `git archive 43f40e8 cera_web shaders | tar -x -C .before`), in the machine start of h200_page_gpu.sh
# (whose unpacked pack holds the real SmolLM2 and Qwen2.5-Coder-0.5B at /opt/pgx/.assets/models).
#   h200_s17_spec.sh stash   carry [".spec/q15.NN"]: one piece of Qwen2.5-Coder-1.5B-Instruct Q4_K_M a call
#                            (`split -b 60M -d .assets/models/qwen2.5-coder-1.5b-instruct-Q4_K_M.gguf .spec/q15.`)
#   h200_s17_spec.sh run     carry [".gl", ".whl", ".before"] (+ the last piece, if any)
# run, in order of priority (SPEC_UNTIL, default 420 s: what would start later is skipped and said so):
#   1. tests/test_speculative.py (verify == decode-step logits, bit for bit, now on the NVIDIA adapter), test_matvec_q8
#   2. h200_s15_verify_cost.py before / after at the synthetic Qwen2.5-1.5B and 0.5B Q4_K_M shapes and on SmolLM2
#   3. bench --lookup (edit / code / prose), before / after, SmolLM2 and the real Qwen2.5-Coder-0.5B
#   4. with every 1.5B piece stashed: bench --draft (the real 0.5B drafting for the real 1.5B), before / after
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p /opt/spec $OUT; cp .spec/q15.* /opt/spec/ 2>/dev/null; ls /opt/spec | tr '\n' ' '; echo
[ "$1" = stash ] && exit 0
test "$1" = run || { echo "usage: h200_s17_spec.sh stash | run"; exit 2; }
. docs/bench/scripts/h200_setup_main.sh
R=$PWD
T0=$(date +%s)
UNTIL=${SPEC_UNTIL:-420}
t() { echo "== t=$(( $(date +%s) - T0 ))s $*"; }
late() { [ $(( $(date +%s) - T0 )) -gt $UNTIL ] && { t "$* skipped (past SPEC_UNTIL)"; return 0; }; return 1; }
M=/opt/pgx/.assets/models
SMOL=$M/SmolLM2-135M-Instruct.Q4_1.gguf
Q05=$M/qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf
Q15=/tmp/q15.gguf
if [ ! -f $Q15 ] && [ $(ls /opt/spec/q15.* 2>/dev/null | wc -l) -ge ${SPEC_PIECES:-18} ]; then
  cat /opt/spec/q15.* > $Q15; sha256sum $Q15 | tee $OUT/h200-s17-q15-sha256.txt
fi
ls -la $M $Q15 2>&1
in_code() {    # before|after COMMAND...: run in .before (43f40e8) or in this checkout
  if [ $1 = before ]; then shift; (cd $R/.before && PYTHONPATH=/tmp/site:$R/.before "$@"); else shift; "$@"; fi; }
python3 -m pytest tests/test_speculative.py tests/test_matvec_q8.py -q -p no:cacheprovider 2>&1 \
  | tee $OUT/h200-s17-pytest-speculative.txt | tail -3
t tests
S=/tmp/cera_web_synthetic
for sh in qwen2.5-1.5b qwen2.5-0.5b; do
  late "make $sh" || timeout 120 python3 -c "from cera_web.tools.bench import synthetic_path as p; print(p('$sh', 'q4_k_m'))"
done
t made
for f in $S/v2-qwen2.5-1.5b-q4_k_m.gguf $S/v2-qwen2.5-0.5b-q4_k_m.gguf $SMOL; do
  for code in before after; do
    late "verify cost $code $f" && continue
    r=$(in_code $code timeout 90 python3 $R/docs/bench/scripts/h200_s15_verify_cost.py $f) \
      && echo "{\"code\": \"$code\", \"file\": \"$(basename $f)\", \"run\": $r}" | tee -a $OUT/h200-s17-verify-cost.jsonl
  done
done
t verify
late profile || timeout 90 python3 docs/bench/scripts/h200_s16_verify_profile.py $S/v2-qwen2.5-1.5b-q4_k_m.gguf \
  > $OUT/h200-s17-verify-profile.json; tail -c 600 $OUT/h200-s17-verify-profile.json; echo
t profile
for f in $SMOL $Q05; do
  for code in after before; do
    late "lookup $code $f" && continue
    r=$(in_code $code timeout 150 python3 -m cera_web bench --model $f --lookup --decode-tokens 256 --repeats 2 \
      --context 2048) && echo "{\"code\": \"$code\", \"file\": \"$(basename $f)\", \"run\": $r}" \
      | tee -a $OUT/h200-s17-lookup.jsonl | cut -c1-600
  done
done
t lookup
if [ -f $Q15 ]; then
  for code in after before; do
    late "draft $code" && continue
    r=$(in_code $code timeout 200 python3 -m cera_web bench --model $Q15 --draft $Q05 --decode-tokens 256 \
      --repeats 2 --context 2048) && echo "{\"code\": \"$code\", \"file\": \"q15 + draft q05\", \"run\": $r}" \
      | tee -a $OUT/h200-s17-draft.jsonl | cut -c1-600
  done
fi
t end
