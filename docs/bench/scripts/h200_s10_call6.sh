# H200 call 6 (session 10): matvec_q8 with the inputs' 16-sums precomputed (HEAD) against the commit before
# (.dev_m), same call: bandwidth of Q4_1 / Q4_K / Q5_K / Q6_K (Q6_K: unchanged, a control), decode end to end.
. docs/bench/scripts/h200_setup_main.sh
K=cera_web.bench_kernels
for w in m head; do
  if [ $w = m ]; then d=.dev_m; else d=.; fi
  (cd $d && PYTHONPATH=/tmp/site:$PWD timeout 90 python3 -m $K --types Q4_1,Q4_K,Q5_K,Q6_K --shapes 4096x4096,14336x4096 2>&1 >/dev/null | grep 'int8 aligned\|int8 file' | sed "s/^/$w /") | tee -a $OUT/kernels.txt
done
B="python3 -m cera_web bench --decode-tokens 128 --repeats 2 --prompt-tokens 64"
run() {
  w=$1; tag=$2; shift 2
  if [ $w = m ]; then d=.dev_m; else d=.; fi
  r=$(cd $d && PYTHONPATH=/tmp/site:$PWD timeout 100 $B "$@") || { echo "FAIL $w $tag"; return; }
  echo "{\"code\": \"$w\", \"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$w $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['decode_tok_s'], d['decode_tok_s_runs'])")"
}
for s in llama-3.2-1b qwen2.5-1.5b; do
  timeout 100 python3 -m cera_web bench --synthetic $s --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen $s"
done
timeout 100 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen q4km"
for i in 1 2; do
  run m 1b --synthetic llama-3.2-1b
  run head 1b --synthetic llama-3.2-1b
  run m 1b-q4km --synthetic llama-3.2-1b --quant q4_k_m
  run head 1b-q4km --synthetic llama-3.2-1b --quant q4_k_m
  run m qwen --synthetic qwen2.5-1.5b
  run head qwen --synthetic qwen2.5-1.5b
done
