# H200 call 4 (session 6): the committed matmul_tiled8 (K steps of 8 for 128 x 128 tiles in 16 KiB, as in call 2)
# only where 128 x 128 tiles give 256 workgroups (the SwiGLU gate/up of 1B-class models), against the 4 x 4 kernel
# everywhere (CERA_WEB_TILE8=0), same call; prefill and decode of the three shapes; the 1B profile; the tests.
# Ran at commit 238ae91 (matmul_tiled8), reverted in 823b31d.
. docs/bench/scripts/h200_setup_main.sh
timeout 100 python3 -m cera_web.bench_kernels --gemm 512 --types Q4_1,Q8_0 --no-int8 --shapes 16384x2048 \
  --tiles "64,64,1;128,128" > $OUT/gemm.json || echo "FAIL gemm"
python3 -c "
import json; d=json.load(open('$OUT/gemm.json'))
for r in d['gemm']: print(r['type'], r['shape'], r['tile'], r['gflops'])"
B="python3 -m cera_web bench --prompt-tokens 512 --decode-tokens 128 --repeats 3"
run() {  # tag args...: one JSON line a run into models.jsonl
  tag=$1; shift
  r=$(timeout 120 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'])")"
}
for s in llama-3.2-1b qwen2.5-1.5b; do
  for q in q4_1 q4_k_m; do
    CERA_WEB_TILE8=0 run "$s $q tile8=0" --synthetic $s --quant $q
    run "$s $q tile8=auto" --synthetic $s --quant $q
  done
done
CERA_WEB_TILE8=0 run "llama-3.2-1b q4_1 tile8=0 (again)" --synthetic llama-3.2-1b
run "llama-3.2-1b q4_1 tile8=auto (again)" --synthetic llama-3.2-1b
run "smollm2-135m q4_1 tile8=auto" --synthetic smollm2-135m
timeout 120 python3 -m cera_web bench --synthetic llama-3.2-1b --prompt-tokens 512 --decode-tokens 16 --repeats 1 --profile > $OUT/profile_1b.json || echo "FAIL profile"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels.py -k "tiled" 2>&1 | tail -4 | tee $OUT/pytest.txt
