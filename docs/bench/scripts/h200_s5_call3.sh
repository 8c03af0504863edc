# H200 call 3 (session 5): split decode attention v2 (ranges of >= 256 keys, as many as a step's keys need, combined in
# the output projection's input load) against the unsplit kernel (CERA_WEB_ATTN_SPLIT=1) in the same call, decoding
# near the start and late in a long prompt, the three shapes; the half KV cache with it; the tests.
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
    CERA_WEB_ATTN_SPLIT=1 run "$s after$a split=1" --synthetic $s --decode-after $a
    run "$s after$a split=auto" --synthetic $s --decode-after $a
  done
  run "$s after3584 split=auto kv=f16" --synthetic $s --decode-after 3584 --kv-cache f16
done
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_matvec_q8.py tests/test_kernels_gemma.py tests/test_kv_half.py \
  tests/test_kernels.py -k "not chromium and not smollm2" 2>&1 | tail -6 | tee $OUT/pytest.txt
