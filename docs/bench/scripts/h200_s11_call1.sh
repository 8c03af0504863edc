# H200 call 1 (session 11): matvec_q8 with 64-weight Q4_K items and vec4 Q6_K (aligned) items (.dev_a) against
# main (b453315, "."), same call: bandwidth of Q4_K / Q6_K, decode end to end on 1B Q4_K_M; then the int8 matvec tests.
T0=$(date +%s)
. docs/bench/scripts/h200_setup_main.sh
K=cera_web.bench_kernels
for w in main new main new; do
  if [ $w = main ]; then d=.; else d=.dev_a; fi
  (cd $d && PYTHONPATH=/tmp/site:$PWD timeout 60 python3 -m $K --types Q4_K,Q6_K --shapes 4096x4096,14336x4096 2>&1 >/dev/null | grep 'int8 aligned\|int8 file\|read' | sed "s/^/$w /") | tee -a $OUT/kernels.txt
  echo "t=$(( $(date +%s) - T0 ))"
done
timeout 60 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen q4km"
echo "t=$(( $(date +%s) - T0 ))"
for w in main new main new; do
  if [ $w = main ]; then d=.; else d=.dev_a; fi
  r=$(cd $d && PYTHONPATH=/tmp/site:$PWD timeout 40 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 64 --decode-tokens 128 --repeats 2) || { echo "FAIL $w"; continue; }
  echo "{\"code\": \"$w\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$w 1b-q4km $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['decode_tok_s'], d['decode_tok_s_runs'])") t=$(( $(date +%s) - T0 ))"
done
cd .dev_a && PYTHONPATH=/tmp/site:$PWD timeout 50 python3 -m pytest -q -p no:cacheprovider tests/test_aligned.py tests/test_matvec_q8.py -k "matvec_q8_aligned or matvec_q8_formats or matvec_q8_fused" 2>&1 | tail -3
echo "t=$(( $(date +%s) - T0 ))"
