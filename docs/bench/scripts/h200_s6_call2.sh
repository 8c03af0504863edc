# H200 call 2 (session 6): the 8 x 8 tiled prefill GEMM (matmul_tiled8.wgsl) against the 4 x 4 one, per shape
# (bench_kernels --gemm) and in the whole prefill (CERA_WEB_TILE8=0: the 4 x 4 kernel everywhere; default: 8 x 8
# where its largest tile gives 256 workgroups; CERA_WEB_TILE=...: one tile for every product); its tests there.
# Ran at commit 238ae91 (matmul_tiled8), reverted in 823b31d.
. docs/bench/scripts/h200_setup_main.sh
timeout 200 python3 -m cera_web.bench_kernels --gemm 512 --types Q4_1,Q8_0 --no-int8 \
  --shapes 2048x2048,3072x2048,16384x2048,2048x8192 --tiles "64,64,1;128,64;64,64;128,128;64,128" > $OUT/gemm.json \
  || echo "FAIL gemm"
python3 -c "
import json; d=json.load(open('$OUT/gemm.json'))
for r in d['gemm']: print(r['type'], r['shape'], r['tile'], r['gflops'])"
B="python3 -m cera_web bench --prompt-tokens 512 --decode-tokens 32 --repeats 2"
run() {  # tag args...: one JSON line a run into models.jsonl
  tag=$1; shift
  r=$(timeout 120 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'])")"
}
for s in llama-3.2-1b qwen2.5-1.5b smollm2-135m; do
  CERA_WEB_TILE8=0 run "$s tile8=0" --synthetic $s
  run "$s tile8=auto" --synthetic $s
done
for t in 128,64 64,64 128,128 64,128; do CERA_WEB_TILE=$t run "llama-3.2-1b tile=$t" --synthetic llama-3.2-1b; done
CERA_WEB_TILE8=0 run "llama-3.2-1b tile8=0 q4_k_m" --synthetic llama-3.2-1b --quant q4_k_m
run "llama-3.2-1b tile8=auto q4_k_m" --synthetic llama-3.2-1b --quant q4_k_m
timeout 120 python3 -m cera_web bench --synthetic llama-3.2-1b --prompt-tokens 512 --decode-tokens 16 --repeats 1 --profile > $OUT/profile_1b.json || echo "FAIL profile"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels.py -k "tiled" 2>&1 | tail -4 | tee $OUT/pytest.txt
