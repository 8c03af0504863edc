# H200 call 2 (session 7): decode with the next batch submitted before the current one is read (HEAD) against one
# read at a time (8fec046, .dev_b), alternating, same call; matvec_q8 shapes on the aligned layout (--variants8);
# the dispatch probe with host and GPU time apart.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 256 --repeats 3"
run() {  # which tag args...: one JSON line a run into models.jsonl
  which=$1; tag=$2; shift 2
  if [ $which = b ]; then r=$(cd .dev_b && PYTHONPATH=/tmp/site:$PWD timeout 60 $B "$@"); else r=$(timeout 60 $B "$@"); fi \
    || { echo "FAIL $which $tag"; return; }
  echo "{\"code\": \"$which\", \"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$which $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'], d['host_ms_per_token'], d.get('auto_steps_last'))")"
}
for s in smollm2-135m llama-3.2-1b qwen2.5-1.5b; do   # writes the synthetic files first
  timeout 100 python3 -m cera_web bench --synthetic $s --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen $s"
done
for round in 1 2; do
  for s in smollm2-135m llama-3.2-1b; do
    for w in b new; do run $w "$s q4_1" --synthetic $s --prompt-tokens 512; done
  done
done
for w in b new; do run $w "qwen2.5-1.5b q4_1" --synthetic qwen2.5-1.5b --prompt-tokens 512; done
timeout 60 python3 docs/bench/scripts/s7_probe.py > $OUT/probe.json || echo "FAIL probe"; cat $OUT/probe.json
timeout 200 python3 -m cera_web.bench_kernels --types Q4_1,Q8_0 --shapes 2048x8192,2048x2048,16384x2048,14336x4096,4096x4096 \
  --repeats 5 --serial --variants8 "lanes=4,wg=256,sg=1;lanes=8,wg=256,sg=1;lanes=16,wg=256,sg=1;lanes=32,wg=256,sg=1;lanes=8,wg=128,sg=1;lanes=16,wg=128,sg=1" \
  > $OUT/variants.json 2>/dev/null || echo "FAIL variants"
python3 -c "
import json; d=json.load(open('$OUT/variants.json'))
for r in d['results']:
    if r.get('kernel') == 'matvec_q8': print(r['type'], r['shape'], r['layout'], r['lanes'], r['wg'], r['gbps'], r.get('serial_gbps'))"
