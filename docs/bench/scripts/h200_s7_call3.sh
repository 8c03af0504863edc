# H200 call 3 (session 7): HEAD's speed on the three shapes (and Q4_K_M, a long context); SmolLM2 with the file's layout
# beside the aligned one; int8 dot product throughput against f32 FMA (is dot4I8Packed native through naga?); the
# prefill GEMMs (f32 and the opt-in int8 one); matvec_q8 shapes for SmolLM2's short rows on the aligned layout.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 256 --repeats 3"
run() {  # aligned tag args...: one JSON line a run into models.jsonl
  a=$1; tag=$2; shift 2
  r=$(CERA_WEB_ALIGNED=$a timeout 60 $B "$@") || { echo "FAIL $a $tag"; return; }
  echo "{\"aligned\": $a, \"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "aligned=$a $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'], d['host_ms_per_token'], d.get('auto_steps_last'))")"
}
timeout 30 python3 docs/bench/scripts/fma_micro.py 4096 > $OUT/fma.json; cat $OUT/fma.json
for s in smollm2-135m llama-3.2-1b qwen2.5-1.5b; do
  timeout 100 python3 -m cera_web bench --synthetic $s --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen $s"
done
for round in 1 2; do
  for a in 0 1; do run $a "smollm2-135m q4_1" --synthetic smollm2-135m --prompt-tokens 512; done
  run 1 "llama-3.2-1b q4_1" --synthetic llama-3.2-1b --prompt-tokens 512
done
run 1 "qwen2.5-1.5b q4_1" --synthetic qwen2.5-1.5b --prompt-tokens 512
run 1 "llama-3.2-1b q4_k_m" --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 512
run 1 "llama-3.2-1b q4_1 after 3584" --synthetic llama-3.2-1b --prompt-tokens 512 --context 4096 --decode-after 3584
timeout 100 python3 -m cera_web.bench_kernels --gemm > $OUT/gemm.json 2>$OUT/gemm.txt || echo "FAIL gemm"; cat $OUT/gemm.txt | tail -20
timeout 100 python3 -m cera_web.bench_kernels --types Q4_1,Q8_0 --shapes 960x576,576x576,3072x576,576x1536 --repeats 5 --serial \
  --variants8 "lanes=4,wg=256,sg=1;lanes=8,wg=256,sg=1;lanes=16,wg=256,sg=1;lanes=32,wg=256,sg=1;lanes=16,wg=64,sg=1" \
  > $OUT/small.json 2>/dev/null || echo "FAIL small"
python3 -c "
import json; d=json.load(open('$OUT/small.json'))
for r in d['results']:
    if r.get('kernel') == 'matvec_q8': print(r['type'], r['shape'], r['layout'], r['lanes'], r['wg'], r['us'], r.get('serial_us'))"
