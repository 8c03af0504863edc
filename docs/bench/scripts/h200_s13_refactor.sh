# H200 call (session 13, issue 25): the refactored engine (".": open_model, one decode loop, the weight-format
# registry with choose_product, WGSL includes, the tools subpackage) against the code before the session
# (.before: `git archive f2b61ed`), alternating, same process settings, defaults (what users get).
# Carry: .gl .whl .before
T0=$(date +%s)
. docs/bench/scripts/h200_setup_main.sh
for s in smollm2-135m llama-3.2-1b qwen2.5-1.5b; do
  timeout 100 python3 -m cera_web bench --synthetic $s --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen $s"
done
timeout 100 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen q4km"
echo "generated t=$(( $(date +%s) - T0 ))"
run() {
  code=$1; tag=$2; shift 2
  if [ $code = before ]; then d=.before; else d=.; fi
  r=$(cd $d && PYTHONPATH=/tmp/site:$PWD timeout 90 python3 -m cera_web bench --prompt-tokens 512 --decode-tokens 128 --repeats 2 "$@") || { echo "FAIL $code $tag"; return; }
  echo "{\"code\": \"$code\", \"tag\": \"$tag\", \"run\": $r}" >> $OUT/refactor.jsonl
  echo "$code $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print('prefill', d['prefill_tok_s'], d['prefill_tok_s_runs'], 'decode', d['decode_tok_s'], d['decode_tok_s_runs'])") t=$(( $(date +%s) - T0 ))"
}
for round in 1 2; do
  for code in before after; do
    run $code smollm2 --synthetic smollm2-135m
    run $code 1b --synthetic llama-3.2-1b
    run $code qwen1.5b --synthetic qwen2.5-1.5b
    run $code 1b-q4km --synthetic llama-3.2-1b --quant q4_k_m
  done
done
