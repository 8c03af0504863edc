# H200 call 7 (session 6): attention_tiled.wgsl with its masks as vector selects (no per-component loops) against
# attention.wgsl (CERA_WEB_ATTN_TILED=0): GPU time of a 512-token chunk by kind of dispatch, two rounds, then the
# whole prefill of the shapes with heads of 64.
. docs/bench/scripts/h200_setup_main.sh
for round in 1 2; do
  for s in smollm2-135m llama-3.2-1b; do
    for t in 0 1; do
      CERA_WEB_ATTN_TILED=$t timeout 120 python3 -m cera_web bench --synthetic $s --prompt-tokens 512 --decode-tokens 16 \
        --repeats 1 --profile > $OUT/profile_${s}_tiled${t}_r$round.json || echo "FAIL profile"
      python3 -c "
import json; d=json.load(open('$OUT/profile_${s}_tiled${t}_r$round.json')); p=d.get('profile', d)
print('$s tiled=$t r$round', 'chunk ms', round(p['prefill_chunk_gpu_total_us'] / 1000, 2), 'attention us', p['prefill_chunk']['attention']['us_per_dispatch'])"
    done
  done
done
B="python3 -m cera_web bench --decode-tokens 32 --repeats 3 --prompt-tokens 512"
for s in smollm2-135m llama-3.2-1b; do
  for t in 0 1; do
    r=$(CERA_WEB_ATTN_TILED=$t timeout 120 $B --synthetic $s) || { echo "FAIL $s"; continue; }
    echo "{\"tag\": \"$s tiled=$t\", \"run\": $r}" >> $OUT/models.jsonl
    echo "$s tiled=$t $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'])")"
  done
done
