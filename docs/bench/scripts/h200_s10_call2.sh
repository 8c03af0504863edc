# H200 call 2 (session 10): attention_tiled64.wgsl (64 query rows a workgroup, subgroup row maxima) against
# attention_tiled.wgsl (CERA_WEB_ATTN_TILED=32), same call: the kernels alone (1B's and SmolLM2's heads after 0, 512
# and 3,584 cached tokens, SmolLM2's splits), end to end (512- and 4,096-token prompts, alternating), and the
# attention tests on this GPU (subgroups of 32).
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 16 --repeats 2"
run() {
  tag=$1; shift
  r=$(timeout 120 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['prefill_tok_s_runs'], d['decode_tok_s'])")"
}
K=cera_web.bench_kernels
for rows in 32 64; do
  for p in 0 512 3584; do
    CERA_WEB_ATTN_TILED=$rows timeout 40 python3 -m $K --attention 32:8 --gemm 512 --pos0 $p >> $OUT/attn.jsonl 2>>$OUT/attn.txt || echo "FAIL attn $rows $p"
  done
  CERA_WEB_ATTN_TILED=$rows timeout 40 python3 -m $K --attention 9:3 --gemm 512 --splits 1,2,4,8 >> $OUT/attn.jsonl 2>>$OUT/attn.txt || echo "FAIL attn smol $rows"
done
cat $OUT/attn.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels.py tests/test_kernels_gemma.py -k "attention_tiled or half_cache" -m "not browser" > $OUT/pytest.txt 2>&1; tail -2 $OUT/pytest.txt
timeout 100 python3 -m cera_web bench --synthetic llama-3.2-1b --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen"
timeout 100 python3 -m cera_web bench --synthetic smollm2-135m --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen"
for i in 1 2; do
  CERA_WEB_ATTN_TILED=32 run 1b-r32 --synthetic llama-3.2-1b --prompt-tokens 512
  run 1b-r64 --synthetic llama-3.2-1b --prompt-tokens 512
  CERA_WEB_ATTN_TILED=32 run 1b-4k-r32 --synthetic llama-3.2-1b --prompt-tokens 4000 --context 4096
  run 1b-4k-r64 --synthetic llama-3.2-1b --prompt-tokens 4000 --context 4096
  CERA_WEB_ATTN_TILED=32 run smol-r32 --synthetic smollm2-135m --prompt-tokens 512
  run smol-r64 --synthetic smollm2-135m --prompt-tokens 512
done
