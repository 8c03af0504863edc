# H200 final call (session 4): the three shapes with defaults, session 3's code (.dev_base) against this session's in
# the same call, the int8 decode products switched off (CERA_WEB_INT8=0) to isolate them, every type, matrix-vector
# bandwidth (float32 and int8 kernels), constrained vs unconstrained decode (two real vocabularies), a profile at
# 1B, then the GPU-path tests. Results stream into $OUT as they come.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --prompt-tokens 512 --decode-tokens 128 --repeats 2"
run() {  # dir tag args...: one JSON line a run into models.jsonl
  dir=$1; tag=$2; shift 2
  r=$(cd $dir && timeout 75 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'], d.get('auto_steps_last'), d.get('host_ms_per_token'))")"
}
for s in smollm2-135m llama-3.2-1b qwen2.5-1.5b; do
  run .dev_base "$s q4_1 base" --synthetic $s
  run . "$s q4_1 new" --synthetic $s
  CERA_WEB_INT8=0 run . "$s q4_1 new INT8=0" --synthetic $s
done
for s in smollm2-135m llama-3.2-1b qwen2.5-1.5b; do
  run .dev_base "$s q4_k_m base" --synthetic $s --quant q4_k_m
  for q in q4_k_m q8_0 f16; do run . "$s $q new" --synthetic $s --quant $q; done
done
timeout 100 python3 -m cera_web.bench_kernels --types Q4_1,Q8_0,Q4_K,Q6_K \
  --shapes 4096x4096,14336x4096,2048x2048,16384x2048,2048x8192,128256x2048 --repeats 5 --target-ms 10 --no-serial \
  > $OUT/kernels.json 2> $OUT/kernels.txt; grep -v "^Q.*lanes 32 rpt" $OUT/kernels.txt | tail -30; grep "read" $OUT/kernels.txt | head -12
for v in SmolLM2-135M-Instruct.Q4_1 qwen2.5-coder-0.5b-instruct-Q4_K_M; do
  timeout 100 python3 -m cera_web.bench_grammar --decode --vocab-json .dev_vocab/$v.json --decode-tokens 128 > $OUT/grammar-$v.json
  python3 -c "import json; d=json.load(open('$OUT/grammar-$v.json')); print('$v', {k: (v.get('decode_tok_s'), v.get('vs_unconstrained'), v.get('mask_us_mean'), v.get('mask_us_max')) for k, v in d.items() if isinstance(v, dict)})"
done
timeout 60 $B --synthetic llama-3.2-1b --profile > $OUT/profile-1b.json
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_matvec_q8.py tests/test_constrained.py tests/test_kernels.py \
  tests/test_engine.py -k "not browser and not chromium" 2>&1 | tail -4 | tee $OUT/pytest.txt
