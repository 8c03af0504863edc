# H200 call 8 (session 6): matvec_q8 with its input quantization written out element by element (no loops over a
# private array) against the committed kernel (.dev_base: git archive of the previous commit), same call: per shape
# (bench_kernels) and whole-model decode, alternating.
. docs/bench/scripts/h200_setup_main.sh
K="python3 -m cera_web.bench_kernels --types Q4_1,Q8_0,Q4_K --shapes 2048x2048,16384x2048,2048x8192,128256x2048 --repeats 5"
(cd .dev_base && PYTHONPATH=/tmp/site:$PWD timeout 150 $K > $OUT/kern_base.json 2>/dev/null) || echo "FAIL kern base"
timeout 150 $K > $OUT/kern_new.json 2>/dev/null || echo "FAIL kern new"
python3 - <<PY
import json
a = {(r['type'], r['shape']): r for r in json.load(open('$OUT/kern_base.json'))['results'] if r.get('kernel') == 'matvec_q8'}
b = {(r['type'], r['shape']): r for r in json.load(open('$OUT/kern_new.json'))['results'] if r.get('kernel') == 'matvec_q8'}
for k in a:
    print(k, 'GB/s', a[k]['gbps'], '->', b[k]['gbps'], ' serial us', a[k].get('serial_us'), '->', b[k].get('serial_us'))
PY
B="python3 -m cera_web bench --prompt-tokens 16 --decode-tokens 128 --repeats 3"
for round in 1 2; do
  for s in "llama-3.2-1b --quant q4_1" "qwen2.5-1.5b --quant q4_1" "smollm2-135m --quant q4_1"; do
    r=$(cd .dev_base && PYTHONPATH=/tmp/site:$PWD timeout 120 $B --synthetic $s) && echo "{\"tag\": \"$s base r$round\", \"run\": $r}" >> $OUT/models.jsonl \
      && echo "$s base r$round $(echo "$r" | python3 -c "import json,sys; print(json.load(sys.stdin)['decode_tok_s'])")"
    r=$(timeout 120 $B --synthetic $s) && echo "{\"tag\": \"$s new r$round\", \"run\": $r}" >> $OUT/models.jsonl \
      && echo "$s new r$round $(echo "$r" | python3 -c "import json,sys; print(json.load(sys.stdin)['decode_tok_s'])")"
  done
done
