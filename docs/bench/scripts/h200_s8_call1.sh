# H200 call 1 (session 8): session 7's last commit (6fe6c5e, .dev_s7) against 48f5309, same call: prefill 512 /
# decode 64 on the three shapes and Q4_K_M; the new code with its splits switched off / forced other ways (which
# default to keep); profiles of the prefill chunk; matmul_i8 GEMMs old and new (unsplit); the GPU kernel tests.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 64 --repeats 2 --prompt-tokens 512"
run() {  # which tag args...: one JSON line a run into models.jsonl
  which=$1; tag=$2; shift 2
  if [ $which = s7 ]; then r=$(cd .dev_s7 && PYTHONPATH=/tmp/site:$PWD timeout 60 $B "$@"); else r=$(timeout 60 $B "$@"); fi \
    || { echo "FAIL $which $tag"; return; }
  echo "{\"code\": \"$which\", \"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$which $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'])")"
}
for a in "smollm2-135m q4_1" "llama-3.2-1b q4_1" "qwen2.5-1.5b q4_1" "llama-3.2-1b q4_k_m"; do
  set -- $a
  timeout 120 python3 -m cera_web bench --synthetic $1 --quant $2 --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen $a"
done
for s in smollm2-135m llama-3.2-1b; do
  run s7 "$s" --synthetic $s
  run s8 "$s" --synthetic $s
  CERA_WEB_I8_SPLIT=1 CERA_WEB_ATTN_SPLIT=1 run s8 "$s nosplit" --synthetic $s
done
CERA_WEB_I8_SPLIT=1 run s8 "smollm2-135m attn split only" --synthetic smollm2-135m
CERA_WEB_ATTN_SPLIT=1 run s8 "smollm2-135m gemm split only" --synthetic smollm2-135m
CERA_WEB_ATTN_SPLIT=8 run s8 "smollm2-135m attn8" --synthetic smollm2-135m
CERA_WEB_ATTN_SPLIT=2 run s8 "smollm2-135m attn2" --synthetic smollm2-135m
CERA_WEB_I8_SPLIT=2 run s8 "smollm2-135m gemm2" --synthetic smollm2-135m
CERA_WEB_ATTN_SPLIT=2 run s8 "llama-3.2-1b attn2" --synthetic llama-3.2-1b
CERA_WEB_I8_SPLIT=2 run s8 "llama-3.2-1b gemm2" --synthetic llama-3.2-1b
CERA_WEB_I8_SPLIT=8 run s8 "llama-3.2-1b gemm8" --synthetic llama-3.2-1b
for w in s7 s8; do run $w "qwen2.5-1.5b" --synthetic qwen2.5-1.5b; run $w "llama-3.2-1b q4_k_m" --synthetic llama-3.2-1b --quant q4_k_m; done
for s in smollm2-135m llama-3.2-1b; do
  timeout 100 python3 -m cera_web bench --synthetic $s --prompt-tokens 512 --decode-tokens 16 --profile > $OUT/profile_$s.json || echo "FAIL $s"
  python3 -c "
import json; d=json.load(open('$OUT/profile_$s.json')); p=d['profile']
print('$s', d['prefill_tok_s'], 'prefill chunk gpu us', p.get('prefill_chunk_gpu_total_us'))
for k, v in p['prefill_chunk'].items(): print('  ', k, v['dispatches'], v['gpu_us'])"
done
for w in s7 s8; do
  if [ $w = s7 ]; then (cd .dev_s7 && PYTHONPATH=/tmp/site:$PWD timeout 100 python3 -m cera_web.bench_kernels --gemm --types Q4_1,Q8_0,Q4_K > $OUT/gemm_$w.json 2>$OUT/gemm_$w.txt) || echo "FAIL gemm $w"
  else timeout 100 python3 -m cera_web.bench_kernels --gemm --types Q4_1,Q8_0,Q4_K > $OUT/gemm_$w.json 2>$OUT/gemm_$w.txt || echo "FAIL gemm $w"; fi
  echo "gemm $w"; grep matmul_i8 $OUT/gemm_$w.txt
done
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_gemm8.py tests/test_aligned.py tests/test_kernels.py \
  -k "not chromium and not browser and not smollm2" > $OUT/pytest.txt 2>&1; tail -3 $OUT/pytest.txt
