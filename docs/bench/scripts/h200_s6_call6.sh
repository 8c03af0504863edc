# H200 call 6 (session 6): prefill attention with 32 x 32 register-tiled score blocks (attention_tiled.wgsl, heads
# of 64; default) against attention.wgsl (CERA_WEB_ATTN_TILED=0), same call, alternating: whole prefill of the
# shapes with heads of 64 (SmolLM2, Llama-3.2-1B) at 512 and 2,048 prompt tokens, the profiles, the tests there.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 32 --repeats 3"
run() {  # tag args...: one JSON line a run into models.jsonl
  tag=$1; shift
  r=$(timeout 120 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'])")"
}
for round in 1 2; do
  for s in smollm2-135m llama-3.2-1b; do
    CERA_WEB_ATTN_TILED=0 run "$s p512 tiled=0 r$round" --synthetic $s --prompt-tokens 512
    run "$s p512 tiled=1 r$round" --synthetic $s --prompt-tokens 512
  done
done
for s in smollm2-135m llama-3.2-1b; do
  CERA_WEB_ATTN_TILED=0 run "$s p2048 tiled=0" --synthetic $s --prompt-tokens 2048 --context 4096
  run "$s p2048 tiled=1" --synthetic $s --prompt-tokens 2048 --context 4096
done
run "qwen2.5-1.5b p512 (heads of 128: unchanged)" --synthetic qwen2.5-1.5b --prompt-tokens 512
for s in smollm2-135m llama-3.2-1b; do
  for t in 0 1; do
    CERA_WEB_ATTN_TILED=$t timeout 120 python3 -m cera_web bench --synthetic $s --prompt-tokens 512 --decode-tokens 16 \
      --repeats 1 --profile > $OUT/profile_${s}_tiled$t.json || echo "FAIL profile"
    python3 -c "
import json; d=json.load(open('$OUT/profile_${s}_tiled$t.json')); p=d.get('profile', d)
print('$s tiled=$t', 'chunk ms', round(p['prefill_chunk_gpu_total_us'] / 1000, 2), {k: v['us_per_dispatch'] for k, v in p['prefill_chunk'].items()})"
  done
done
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels.py tests/test_kernels_gemma.py -k "attention" 2>&1 | tail -3 | tee $OUT/pytest.txt
