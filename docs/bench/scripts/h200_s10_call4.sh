# H200 call 4 (session 10): (1) attention_tiled_h128.wgsl (heads of 128) against attention.wgsl (CERA_WEB_ATTN_TILED=0),
# same call: the kernels alone (Qwen2.5-1.5B's 12/2 and a Qwen3-like 16/8 after 0 and 3,584 cached tokens, splits
# 1/2/4), Qwen2.5-1.5B end to end (512- and 4,000-token prompts, alternating), the attention tests on this GPU.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 16 --repeats 2"
run() {
  tag=$1; shift
  r=$(timeout 150 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['prefill_tok_s_runs'], d['decode_tok_s'])")"
}
K=cera_web.bench_kernels
for p in 0 3584; do
  for a in 12:2 16:8; do
    CERA_WEB_ATTN_TILED=0 timeout 60 python3 -m $K --attention $a --head-dim 128 --gemm 512 --pos0 $p 2>&1 >/dev/null | tee -a $OUT/attn.txt
    timeout 60 python3 -m $K --attention $a --head-dim 128 --gemm 512 --pos0 $p --splits 1,2,4 2>&1 >/dev/null | tee -a $OUT/attn.txt
  done
done
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels.py tests/test_kernels_gemma.py tests/test_engine.py -k "attention_tiled or half_cache or heads_of_128" -m "not browser" > $OUT/pytest.txt 2>&1; tail -2 $OUT/pytest.txt
timeout 100 python3 -m cera_web bench --synthetic qwen2.5-1.5b --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen"
for i in 1 2; do
  CERA_WEB_ATTN_TILED=0 run qwen-plain --synthetic qwen2.5-1.5b --prompt-tokens 512
  run qwen-h128 --synthetic qwen2.5-1.5b --prompt-tokens 512
  CERA_WEB_ATTN_TILED=0 run qwen-4k-plain --synthetic qwen2.5-1.5b --prompt-tokens 4000 --context 4096
  run qwen-4k-h128 --synthetic qwen2.5-1.5b --prompt-tokens 4000 --context 4096
done
# Q6_K: matmul_i8 reading the aligned layout as vec4s, and every Q6_K matrix in the aligned layout (HEAD) against the
# commit before (.dev_h: word reads; aligned Q6_K only for the LM head): the Q6_K GEMMs, 1B Q4_K_M end to end.
(cd .dev_h && PYTHONPATH=/tmp/site:$PWD timeout 60 python3 -m $K --gemm --types Q6_K --tiles '64,64,1' 2>&1 >/dev/null | grep matmul_i8 | sed 's/^/before /') | tee -a $OUT/gemm.txt
timeout 60 python3 -m $K --gemm --types Q6_K --tiles '64,64,1' 2>&1 >/dev/null | grep matmul_i8 | sed 's/^/after /' | tee -a $OUT/gemm.txt
timeout 100 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen"
runh() {
  tag=$1; shift
  r=$(cd .dev_h && PYTHONPATH=/tmp/site:$PWD timeout 150 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['prefill_tok_s_runs'], d['decode_tok_s'])")"
}
for i in 1 2 3; do
  runh 1b-q4km-before --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 512 --decode-tokens 64
  run 1b-q4km-after --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 512 --decode-tokens 64
done
