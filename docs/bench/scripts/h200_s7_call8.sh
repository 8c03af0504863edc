# H200 call 8 (session 7): 1B Q4_K_M after the lanes fix (Q6_K's aligned items are not whole blocks:
# no 16-lane cap) against the file's layout (CERA_WEB_ALIGNED=0), alternating, same call.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 128 --repeats 2"
timeout 120 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen"
for a in 0 1 0 1; do
  r=$(CERA_WEB_ALIGNED=$a timeout 60 $B --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 512) || { echo "FAIL $a"; continue; }
  echo "{\"aligned\": $a, \"tag\": \"llama-3.2-1b q4_k_m\", \"run\": $r}" >> $OUT/models.jsonl
  echo "aligned=$a $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'], d['host_ms_per_token'])")"
done
