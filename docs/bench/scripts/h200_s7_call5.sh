# H200 call 5 (session 7): where prefill time goes now (--profile, SmolLM2 and 1B, HEAD); Q4_K_M with the int8 prefill
# (matmul_i8 on the file's Q4_K/Q6_K) against float32 (CERA_WEB_I8_PREFILL=0), same call.
. docs/bench/scripts/h200_setup_main.sh
for s in smollm2-135m llama-3.2-1b; do
  timeout 100 python3 -m cera_web bench --synthetic $s --prompt-tokens 512 --decode-tokens 64 --profile > $OUT/profile_$s.json || echo "FAIL $s"
  python3 -c "
import json; d=json.load(open('$OUT/profile_$s.json')); p=d['profile']
print('$s', d['prefill_tok_s'], d['decode_tok_s'], 'prefill chunk gpu us', p.get('prefill_chunk_gpu_total_us'))
for k, v in p['prefill_chunk'].items(): print('  ', k, v)"
done
for i8 in 0 1; do
  r=$(CERA_WEB_I8_PREFILL=$i8 timeout 100 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 512 --decode-tokens 64 --repeats 2) || echo "FAIL q4km $i8"
  echo "{\"i8_prefill\": $i8, \"run\": $r}" >> $OUT/q4km.jsonl
  echo "i8=$i8 q4_k_m $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'])")"
done
