# H200 call 2 (session 11): only the vec4 Q6_K (aligned) items (.dev_b: main + i8_q6_ka.wgsl of call 1) against
# main ("."), decode end to end on 1B Q4_K_M, alternating.
T0=$(date +%s)
. docs/bench/scripts/h200_setup_main.sh
timeout 60 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen q4km"
for w in main q6 main q6; do
  if [ $w = main ]; then d=.; else d=.dev_b; fi
  r=$(cd $d && PYTHONPATH=/tmp/site:$PWD timeout 40 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 64 --decode-tokens 128 --repeats 2) || { echo "FAIL $w"; continue; }
  echo "{\"code\": \"$w\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$w 1b-q4km $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['decode_tok_s'], d['decode_tok_s_runs'])") t=$(( $(date +%s) - T0 ))"
done
