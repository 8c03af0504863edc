# H200 call 7 (session 7): Q6_K in the aligned layout (default) against the file's (CERA_WEB_ALIGNED=0), same code,
# same call: the matrix-vector bandwidth of Q6_K, 1B Q4_K_M (Q6_K tied LM head and some attn_v / ffn_down) end to
# end, alternating; the aligned layout's kernel tests.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 128 --repeats 2"
run() {  # aligned tag args...
  a=$1; tag=$2; shift 2
  r=$(CERA_WEB_ALIGNED=$a timeout 60 $B "$@") || { echo "FAIL $a $tag"; return; }
  echo "{\"aligned\": $a, \"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "aligned=$a $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'], d['host_ms_per_token'])")"
}
timeout 120 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen"
for a in 0 1 0 1; do run $a "llama-3.2-1b q4_k_m" --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 512; done
timeout 100 python3 -m cera_web.bench_kernels --types Q6_K --shapes 4096x4096,14336x4096,128256x2048 --repeats 5 \
  > $OUT/kernels.json 2>/dev/null || echo "FAIL kernels"
python3 -c "
import json; d=json.load(open('$OUT/kernels.json')); print('peak', d['peak_read_gbps'])
for r in d['results']:
    if r['kernel'] == 'matvec_q8': print(r['type'], r['shape'], r['layout'], r['gbps'], r.get('of_read'))"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_aligned.py > $OUT/pytest.txt 2>&1; tail -2 $OUT/pytest.txt
