# H200 call 1 (session 9): matmul_i8 pairs (8 rows x 4 tokens a thread for plain products with 256+ 64-row tiles)
# against d2e2a47 (.dev_d2e, session 8's code), same call, alternating; HEAD with CERA_WEB_I8_PAIR=1 TR=64 (128-row
# tiles) as a third variant; the int8 GEMMs per shape with pairs on and off; the int8 GEMM tests.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 32 --repeats 2 --prompt-tokens 512"
run() {
  which=$1; tag=$2; shift 2
  if [ $which = d2e ]; then r=$(cd .dev_$which && PYTHONPATH=/tmp/site:$PWD timeout 60 $B "$@"); else r=$(timeout 60 $B "$@"); fi \
    || { echo "FAIL $which $tag"; return; }
  echo "{\"code\": \"$which\", \"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$which $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['prefill_tok_s_runs'], d['decode_tok_s'])")"
}
timeout 100 python3 -m cera_web bench --synthetic llama-3.2-1b --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen"
for i in 1 2 3; do
  run d2e 1b --synthetic llama-3.2-1b
  run head 1b --synthetic llama-3.2-1b
  CERA_WEB_I8_PAIR=1 CERA_WEB_I8_TR=64 run head 1b-tr64 --synthetic llama-3.2-1b
done
for p in 0 1; do
  CERA_WEB_I8_PAIR=$p timeout 40 python3 -m cera_web.bench_kernels --gemm --types Q4_1,Q4_K --tiles '64,64,1' > $OUT/gemm_pair$p.json 2>$OUT/gemm_pair$p.txt || echo "FAIL gemm $p"
  grep matmul_i8 $OUT/gemm_pair$p.txt | sed "s/^/pair=$p /"
done
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_gemm8.py tests/test_aligned.py -k "gemm8 or matmul_i8" > $OUT/pytest.txt 2>&1; tail -2 $OUT/pytest.txt
timeout 60 python3 -m cera_web bench --synthetic qwen2.5-1.5b --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen qwen"
for i in 1 2; do
  run d2e qwen --synthetic qwen2.5-1.5b
  run head qwen --synthetic qwen2.5-1.5b
done
