# H200 call 4 (session 7): prefill on 8-bit activations for the aligned weights (quantize_rows + matmul_i8, the new
# default) against float32 prefill (CERA_WEB_I8_PREFILL=0), same code, same call; the GEMMs alone (f32, matmul_i8 at
# K steps of 2 / 4 / 8 blocks, the old int8 GEMM); kernel tests on this GPU.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 128 --repeats 3"
run() {  # i8 tag args...: one JSON line a run into models.jsonl
  i8=$1; tag=$2; shift 2
  r=$(CERA_WEB_I8_PREFILL=$i8 timeout 60 $B "$@") || { echo "FAIL $i8 $tag"; return; }
  echo "{\"i8_prefill\": $i8, \"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "i8=$i8 $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['ttft_ms'], d['decode_tok_s'], d['i8_prefill'])")"
}
for s in smollm2-135m llama-3.2-1b qwen2.5-1.5b; do
  timeout 100 python3 -m cera_web bench --synthetic $s --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen $s"
done
for s in llama-3.2-1b smollm2-135m qwen2.5-1.5b; do
  for i8 in 0 1; do run $i8 "$s q4_1" --synthetic $s --prompt-tokens 512; done
done
run 0 "llama-3.2-1b q8_0" --synthetic llama-3.2-1b --quant q8_0 --prompt-tokens 512
run 1 "llama-3.2-1b q8_0" --synthetic llama-3.2-1b --quant q8_0 --prompt-tokens 512
for kb in 2 4 8; do
  CERA_WEB_I8_KB=$kb timeout 100 python3 -m cera_web.bench_kernels --gemm --types Q4_1 > $OUT/gemm_kb$kb.json 2>$OUT/gemm_kb$kb.txt || echo "FAIL gemm $kb"
  grep -E "tile \[|matmul_i8" $OUT/gemm_kb$kb.txt | sed "s/^/kb$kb /"
done
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_aligned.py tests/test_gemm8.py > $OUT/pytest.txt 2>&1; tail -3 $OUT/pytest.txt
