# H200 call 5 (session 6): matvec_q8 requesting each row's first items before quantizing its input (default) against
# without (CERA_WEB_PREFETCH=0), same call: per shape (bench_kernels, serial = dependent dispatches as in decode) and
# whole-model decode, alternating the two.
# Ran on uncommitted code (a warm-up load loop in matvec_q8.wgsl switched by CERA_WEB_PREFETCH), not kept.
. docs/bench/scripts/h200_setup_main.sh
K="python3 -m cera_web.bench_kernels --types Q4_1,Q8_0,Q4_K,Q6_K --shapes 2048x2048,3072x2048,16384x2048,2048x8192,4096x4096,14336x4096 --repeats 5"
for p in 0 1; do
  CERA_WEB_PREFETCH=$p timeout 150 $K > $OUT/kern_pf$p.json 2>/dev/null || echo "FAIL kern $p"
done
python3 - <<PY
import json
a = {(r['type'], r['shape']): r for r in json.load(open('$OUT/kern_pf0.json'))['results'] if r.get('kernel') == 'matvec_q8'}
b = {(r['type'], r['shape']): r for r in json.load(open('$OUT/kern_pf1.json'))['results'] if r.get('kernel') == 'matvec_q8'}
for k in a:
    print(k, 'us', a[k]['us'], '->', b[k]['us'], ' serial us', a[k].get('serial_us'), '->', b[k].get('serial_us'))
PY
B="python3 -m cera_web bench --prompt-tokens 16 --decode-tokens 128 --repeats 3"
run() {  # tag args...: one JSON line a run into models.jsonl
  tag=$1; shift
  r=$(timeout 120 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['decode_tok_s'], d['auto_step_ms'])")"
}
for round in 1 2; do
  for s in "llama-3.2-1b --quant q4_1" "llama-3.2-1b --quant q4_k_m" "qwen2.5-1.5b --quant q4_1" "smollm2-135m --quant q4_1" "llama-3.2-1b --quant q8_0"; do
    CERA_WEB_PREFETCH=0 run "$s pf=0 r$round" --synthetic $s
    run "$s pf=1 r$round" --synthetic $s
  done
done
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_matvec_q8.py 2>&1 | tail -3 | tee $OUT/pytest.txt
