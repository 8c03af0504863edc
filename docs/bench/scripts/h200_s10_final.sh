# H200 final call (session 10): the issue's table with this session's code (defaults), three processes a shape
# (two for the longer ones), 4,000-token prompts for 1B and Qwen, the matrix-vector bandwidth table, the int8 GEMMs
# per type, and 1B's profile.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 128 --repeats 2"
run() {
  tag=$1; shift
  r=$(timeout 150 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['prefill_tok_s_runs'], d['decode_tok_s'], d['decode_tok_s_runs'])")"
}
K=cera_web.bench_kernels
for s in smollm2-135m llama-3.2-1b qwen2.5-1.5b; do
  timeout 100 python3 -m cera_web bench --synthetic $s --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen $s"
done
timeout 100 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen q4km"
for i in 1 2 3; do
  run smollm2 --synthetic smollm2-135m --prompt-tokens 512
  run 1b --synthetic llama-3.2-1b --prompt-tokens 512
done
for i in 1 2; do
  run qwen --synthetic qwen2.5-1.5b --prompt-tokens 512
  run 1b-q4km --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 512
done
run 1b-4k --synthetic llama-3.2-1b --prompt-tokens 4000 --context 4200 --decode-tokens 32
run qwen-4k --synthetic qwen2.5-1.5b --prompt-tokens 4000 --context 4200 --decode-tokens 32
timeout 120 python3 -m $K --types Q4_1,Q8_0,Q4_K,Q6_K --shapes 4096x4096,14336x4096 > $OUT/kernels.json 2>$OUT/kernels.txt || echo "FAIL kernels"
grep -v '^ *$' $OUT/kernels.txt | tail -24
timeout 90 python3 -m $K --gemm --types Q4_1,Q8_0,Q4_K,Q6_K --tiles '64,64,1' 2>&1 >/dev/null | grep 'matmul_i8' | tee $OUT/gemm.txt
timeout 90 python3 -m cera_web bench --synthetic llama-3.2-1b --prompt-tokens 512 --decode-tokens 16 --profile > $OUT/profile_1b.json 2>/dev/null || echo "FAIL profile"
python3 -c "
import json, os
d = json.load(open(os.path.join(os.environ['OUT'], 'profile_1b.json'))); p = d['profile']
print('profile 1b', d['prefill_tok_s'], 'chunk ms', p.get('prefill_chunk_total_ms'), {k: round(v['ms'], 3) for k, v in p['prefill_chunk'].items()})"
