# H200 call 1 (session 10): a probe. The int8 GEMMs of 1B's shapes (Q4_1, Q4_K, Q6_K) as the engine runs them and
# with 2 K groups forced; the prefill attention of 1B's heads after 0, 512 and 3,584 cached tokens; 1B end to end
# (q4_1 defaults and with CERA_WEB_I8_KG=2; q4_k_m); matrix-vector bandwidth of Q4_K and Q6_K.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 32 --repeats 2 --prompt-tokens 512"
run() {
  tag=$1; shift
  r=$(timeout 90 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['prefill_tok_s_runs'], d['decode_tok_s'])")"
}
K=cera_web.bench_kernels
timeout 80 python3 -m $K --gemm --types Q4_1,Q4_K,Q6_K --tiles '64,64,1' > $OUT/gemm.json 2>$OUT/gemm.txt || echo "FAIL gemm"
grep matmul_i8 $OUT/gemm.txt
CERA_WEB_I8_KG=2 timeout 60 python3 -m $K --gemm --types Q4_1,Q4_K --tiles '64,64,1' > $OUT/gemm_kg2.json 2>$OUT/gemm_kg2.txt || echo "FAIL gemm kg2"
grep matmul_i8 $OUT/gemm_kg2.txt | sed 's/^/kg2 /'
for p in 0 512 3584; do
  timeout 40 python3 -m $K --attention 32:8 --gemm 512 --pos0 $p > $OUT/attn_$p.json 2>>$OUT/attn.txt || echo "FAIL attn $p"
done
cat $OUT/attn.txt
timeout 100 python3 -m cera_web bench --synthetic llama-3.2-1b --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen"
timeout 100 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen"
for i in 1 2; do
  run 1b --synthetic llama-3.2-1b
  CERA_WEB_I8_KG=2 run 1b-kg2 --synthetic llama-3.2-1b
  run 1b-q4km --synthetic llama-3.2-1b --quant q4_k_m
done
timeout 60 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 512 --decode-tokens 16 --profile > $OUT/profile_q4km.json 2>/dev/null || echo "FAIL profile"
timeout 60 python3 -m $K --types Q4_K,Q6_K --shapes 4096x4096,14336x4096 > $OUT/kernels.json 2>$OUT/kernels.txt || echo "FAIL kernels"
tail -12 $OUT/kernels.txt
