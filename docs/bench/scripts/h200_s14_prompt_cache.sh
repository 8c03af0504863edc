# H200 call (session 14, issue 29): the prompt cache's time to first token, restored from a snapshot file vs
# recomputed (bench --prompt-cache: 2,000 tokens seen before + 16 new), f32 and f16 caches, three synthetic shapes;
# then tests/test_snapshot.py on this GPU. v2 (second call): the restore and the prefill after it timed apart. Carry: .gl .whl
T0=$(date +%s)
. docs/bench/scripts/h200_setup_main.sh
for s in smollm2-135m llama-3.2-1b qwen2.5-1.5b; do
  q=q4_k_m; [ $s = smollm2-135m ] && q=q4_1
  for kv in f32 f16; do
    r=$(timeout 150 python3 -m cera_web bench --synthetic $s --quant $q --prompt-cache --prompt-tokens 2000 \
        --context 2048 --kv-cache $kv --repeats 3) || { echo "FAIL $s $kv"; continue; }
    echo "$r" >> $OUT/prompt_cache_v2.jsonl
    echo "$s $kv $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print({k: d[k] for k in ('ttft_recomputed_ms','ttft_restored_ms','speedup','restore_ms','ttft_after_restore_ms','speedup_after_restore','bytes_per_token','save_ms')})") t=$(( $(date +%s) - T0 ))"
  done
done
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_snapshot.py 2>&1 | tee $OUT/pytest_snapshot.txt | tail -5
echo "done t=$(( $(date +%s) - T0 ))"
