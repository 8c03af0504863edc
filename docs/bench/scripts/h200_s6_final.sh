# H200 final call (session 6): session 5's last commit (7db9889, .dev_s5) against this session's code, same call:
# the three shapes (prefill 512, decode 128), Q4_K_M at 1B, decode late in a long prompt; the bandwidth table.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 128 --repeats 2"
run() {  # which tag args...: one JSON line a run into models.jsonl
  which=$1; tag=$2; shift 2
  if [ $which = s5 ]; then r=$(cd .dev_s5 && PYTHONPATH=/tmp/site:$PWD timeout 45 $B "$@"); else r=$(timeout 45 $B "$@"); fi \
    || { echo "FAIL $which $tag"; return; }
  echo "{\"code\": \"$which\", \"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$which $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'], d.get('auto_steps_last'))")"
}
for s in llama-3.2-1b qwen2.5-1.5b smollm2-135m; do
  for w in s5 s6; do run $w "$s q4_1" --synthetic $s --prompt-tokens 512; done
done
for q in q4_k_m; do
  for w in s5 s6; do run $w "llama-3.2-1b $q" --synthetic llama-3.2-1b --quant $q --prompt-tokens 512; done
done
for w in s5 s6; do run $w "llama-3.2-1b q4_1 after 3584" --synthetic llama-3.2-1b --prompt-tokens 512 --context 4096 --decode-after 3584; done
timeout 100 python3 -m cera_web.bench_kernels --types Q4_1,Q8_0,Q4_K,Q6_K --shapes 4096x4096,14336x4096 --repeats 5 \
  > $OUT/kernels.json 2>/dev/null || echo "FAIL kernels"
python3 -c "
import json; d=json.load(open('$OUT/kernels.json')); print('peak', d['peak_read_gbps'])
for r in d['results']: print(r['type'], r['shape'], r.get('kernel', 'matmul'), r['gbps'])"
