# H200 call 2 (session 5): the KV cache in halves (--kv-cache f16) against float32 in the same call, decoding near
# the start (--decode-after 16, llama-bench's tg) and late in a long conversation (--decode-after 1536 / 3584), the
# three shapes; then the kernel and engine tests of the half cache.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 128 --repeats 2 --prompt-tokens 512 --context 4096"
run() {  # tag args...: one JSON line a run into models.jsonl
  tag=$1; shift
  r=$(timeout 90 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'], d.get('auto_steps_last'))")"
}
for s in llama-3.2-1b qwen2.5-1.5b smollm2-135m; do
  for a in 16 1536 3584; do
    for kv in f32 f16; do run "$s after$a kv=$kv" --synthetic $s --decode-after $a --kv-cache $kv; done
  done
done
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels_gemma.py tests/test_kv_half.py \
  -k "half and not smollm2" 2>&1 | tail -4 | tee $OUT/pytest.txt
