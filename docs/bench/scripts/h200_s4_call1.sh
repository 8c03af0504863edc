# H200 call 1 (session 4): attention rewrite before/after (main vs .dev_base), the int8 decode matvec and the int8
# prefill GEMM branches' kernel benchmarks and model runs, attention tests on the GPU.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --prompt-tokens 512 --decode-tokens 128 --repeats 2"
run() {  # dir tag args...: one JSON line a run
  dir=$1; tag=$2; shift 2
  r=$(cd $dir && timeout 90 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'], d.get('int8_prefill',''))")"
}
for s in smollm2-135m llama-3.2-1b; do
  run .dev_base "$s base" --synthetic $s
  run . "$s attn" --synthetic $s
  CERA_WEB_ATTN_SG=0 run . "$s attn, decode split off" --synthetic $s
  run .dev_int8mv "$s int8mv" --synthetic $s
  CERA_WEB_INT8=0 run .dev_int8mv "$s int8mv INT8=0" --synthetic $s
  run .dev_gemm8 "$s gemm8" --synthetic $s
done
(cd . && timeout 60 $B --synthetic llama-3.2-1b --profile > $OUT/profile-1b-attn.json)
(cd .dev_int8mv && timeout 100 python3 -m cera_web.bench_kernels --types Q4_1,Q8_0,Q4_K,Q6_K --shapes 4096x4096,14336x4096,2048x2048,16384x2048,2048x8192 \
  --repeats 5 --target-ms 10 --no-serial --variants8 "lanes=16,wg=256,sg=1;lanes=8,wg=256,sg=1;lanes=32,wg=256,sg=1" > $OUT/int8mv-kernels.json 2> $OUT/int8mv-kernels.txt; tail -40 $OUT/int8mv-kernels.txt)
(cd .dev_gemm8 && timeout 100 python3 -m cera_web.bench_kernels --gemm 512 --types Q4_1,Q8_0,Q4_K --shapes 2048x2048,16384x2048,2048x8192 \
  --tiles8 "tr=128,tt=64,rr=8,rt=8,kb=2,dot=1;tr=128,tt=64,rr=8,rt=8,kb=2,dot=0;tr=64,tt=64,rr=4,rt=4,kb=2,dot=1" > $OUT/gemm8-kernels.json 2> $OUT/gemm8-kernels.txt; tail -30 $OUT/gemm8-kernels.txt)
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels.py tests/test_kernels_gemma.py -k "attention" 2>&1 | tail -3 | tee $OUT/pytest-attn.txt
