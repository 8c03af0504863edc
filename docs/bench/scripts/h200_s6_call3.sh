# H200 call 3 (session 6): matmul_tiled8 with K steps sized by the device's workgroup memory (up to 4 items a
# thread), per shape and in the whole prefill: CERA_WEB_TILE8=0 (the 4 x 4 kernel everywhere) against the default
# (128 x 128 tiles of 8 x 8 where they give 256 workgroups), same call; its tests there.
# Ran at commit 238ae91 (matmul_tiled8), reverted in 823b31d.
. docs/bench/scripts/h200_setup_main.sh
python3 -c "from cera_web.gpu.native import NativeDevice as D; print('wg memory', D.create().limits.get('max-compute-workgroup-storage-size'))"
timeout 200 python3 -m cera_web.bench_kernels --gemm 512 --types Q4_1,Q8_0 --no-int8 \
  --shapes 2048x2048,3072x2048,16384x2048,2048x8192 --tiles "64,64,1;128,64;64,64;128,128;64,128" > $OUT/gemm.json \
  || echo "FAIL gemm"
python3 -c "
import json; d=json.load(open('$OUT/gemm.json'))
for r in d['gemm']: print(r['type'], r['shape'], r['tile'], r['gflops'])"
B="python3 -m cera_web bench --prompt-tokens 512 --decode-tokens 32 --repeats 3"
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
CERA_WEB_TILE8=0 run "smollm2-135m q4_1 tile8=0" --synthetic smollm2-135m
run "smollm2-135m q4_1 tile8=auto" --synthetic smollm2-135m
timeout 120 python3 -m cera_web bench --synthetic llama-3.2-1b --prompt-tokens 512 --decode-tokens 16 --repeats 1 --profile > $OUT/profile_1b.json || echo "FAIL profile"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels.py -k "tiled" 2>&1 | tail -4 | tee $OUT/pytest.txt
