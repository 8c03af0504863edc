# H200 call 3 (session 8): session 7's last commit (6fe6c5e, .dev_s7), call 1's code with the attention split at
# 256 workgroups and early submission (687f98d, .dev_c1), the same without early submission (.dev_noearly: HEAD with
# Model.prefill's early=False) and HEAD (quantize_rows a vec4 a thread, matmul_i8 K groups), same call; K groups
# forced other ways; a profile; the kernel tests.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 64 --repeats 3 --prompt-tokens 512"
run() {  # which tag args...: one JSON line a run into models.jsonl (which: head or a .dev_NAME directory's NAME)
  which=$1; tag=$2; shift 2
  if [ $which = head ]; then r=$(timeout 60 $B "$@"); else r=$(cd .dev_$which && PYTHONPATH=/tmp/site:$PWD timeout 60 $B "$@"); fi \
    || { echo "FAIL $which $tag"; return; }
  echo "{\"code\": \"$which\", \"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$which $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'])")"
}
for a in "smollm2-135m q4_1" "llama-3.2-1b q4_1" "qwen2.5-1.5b q4_1" "llama-3.2-1b q4_k_m"; do
  set -- $a
  timeout 120 python3 -m cera_web bench --synthetic $1 --quant $2 --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen $a"
done
for s in smollm2-135m llama-3.2-1b; do
  for w in s7 c1 noearly head; do run $w "$s" --synthetic $s; done
done
CERA_WEB_I8_KG=1 run head "smollm2-135m kg1" --synthetic smollm2-135m
CERA_WEB_I8_KG=2 run head "smollm2-135m kg2" --synthetic smollm2-135m
CERA_WEB_I8_KG=2 run head "llama-3.2-1b kg2" --synthetic llama-3.2-1b
for w in s7 head; do
  run $w "qwen2.5-1.5b" --synthetic qwen2.5-1.5b
  run $w "llama-3.2-1b q4_k_m" --synthetic llama-3.2-1b --quant q4_k_m
done
timeout 100 python3 -m cera_web bench --synthetic smollm2-135m --prompt-tokens 512 --decode-tokens 16 --profile > $OUT/profile_smollm2-135m.json || echo "FAIL profile"
python3 -c "
import json; d=json.load(open('$OUT/profile_smollm2-135m.json')); p=d['profile']
print('smollm2 profile (pass after 512)', d['prefill_tok_s'], 'prefill chunk gpu us', p.get('prefill_chunk_gpu_total_us'))
for k, v in p['prefill_chunk'].items(): print('  ', k, v['dispatches'], v['gpu_us'])"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_gemm8.py tests/test_aligned.py tests/test_kernels.py \
  -k "not chromium and not browser and not smollm2" > $OUT/pytest.txt 2>&1; tail -3 $OUT/pytest.txt
