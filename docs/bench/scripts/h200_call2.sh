# H200 call 2 (session 3): prefill GEMM tiles at 1B shapes; the kernel/model tests on the GPU.
. docs/bench/scripts/h200_setup.sh
B="python3 -m cera_web bench --prompt-tokens 512 --decode-tokens 32 --repeats 2"
run() {  # tag, then bench arguments; one JSON line a run into models.jsonl
  tag=$1; shift
  r=$(timeout 120 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | grep -o '"prefill_tok_s.*api')"
}
for s in llama-3.2-1b qwen2.5-1.5b; do
  for t in "" 64,64,1 64,32,1 64,32,2 32,32,4; do
    CERA_WEB_TILE=$t run "$s tile=$t" --synthetic $s
  done
done
timeout 300 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels.py tests/test_formats.py tests/test_models.py \
  tests/test_bench.py 2>&1 | tail -15 | tee $OUT/pytest.txt
