# H200 call 3 (session 3): the final table (3 shapes x 4 types, default settings), bandwidth, A/B of this session's
# decode changes, a profile at 1B, then the GPU-path tests. Results stream into $OUT as they come.
. docs/bench/scripts/h200_setup.sh
B="python3 -m cera_web bench --prompt-tokens 512 --decode-tokens 128 --repeats 2"
run() {  # tag, then bench arguments; one JSON line a run into models.jsonl
  tag=$1; shift
  r=$(timeout 90 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | grep -o '"steps_per_read.*api' | cut -c1-200)"
}
for s in smollm2-135m llama-3.2-1b qwen2.5-1.5b; do
  for q in q4_1 q8_0 q4_k_m f16; do run "$s $q default" --synthetic $s --quant $q; done
done
timeout 80 python3 -m cera_web.bench_kernels --types Q4_1,Q8_0,Q4_K,Q6_K,F16 --shapes 4096x4096,14336x4096 \
  --repeats 5 --target-ms 10 --no-serial --variants "sg=0;sg=1" > $OUT/kernels.json 2> $OUT/kernels.txt
cat $OUT/kernels.txt
for s in smollm2-135m llama-3.2-1b qwen2.5-1.5b; do
  CERA_WEB_MATVEC=sg=0 CERA_WEB_ARGMAX_PARTS=1 run "$s q4_1 before: spr4 sg0 argmax1" --synthetic $s --steps-per-read 4
  CERA_WEB_ARGMAX_PARTS=1 run "$s q4_1 auto argmax1" --synthetic $s
done
for s in llama-3.2-1b qwen2.5-1.5b; do CERA_WEB_MATVEC=lanes=16 run "$s q4_1 auto lanes16" --synthetic $s; done
timeout 60 $B --synthetic llama-3.2-1b --profile > $OUT/profile.json
timeout 100 python3 -m pytest -q -x -p no:cacheprovider tests/test_models.py tests/test_kernels.py -k "not page" \
  2>&1 | tail -4 | tee $OUT/pytest.txt
