# H200 call 6 (session 8): K parts for SmolLM2's down projection (HEAD) against e37b674 (.dev_e37, the final call's
# code), same call, alternating, five processes each; profiles of both; the int8 GEMM tests.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 64 --repeats 2 --prompt-tokens 512"
run() {
  which=$1; tag=$2; shift 2
  if [ $which = head ]; then r=$(timeout 60 $B "$@"); else r=$(cd .dev_$which && PYTHONPATH=/tmp/site:$PWD timeout 60 $B "$@"); fi \
    || { echo "FAIL $which $tag"; return; }
  echo "{\"code\": \"$which\", \"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$which $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['prefill_tok_s_runs'], d['decode_tok_s'])")"
}
timeout 120 python3 -m cera_web bench --synthetic smollm2-135m --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen"
for i in 1 2 3 4 5; do for w in e37 head; do run $w smollm2-135m --synthetic smollm2-135m; done; done
for w in e37 head; do
  if [ $w = head ]; then d=.; else d=.dev_$w; fi
  (cd $d && PYTHONPATH=/tmp/site:$PWD timeout 60 python3 -m cera_web bench --synthetic smollm2-135m --prompt-tokens 512 --decode-tokens 16 --profile > $OUT/profile_$w.json) || echo "FAIL profile $w"
  python3 -c "
import json; d=json.load(open('$OUT/profile_$w.json')); p=d['profile']
print('$w profile (a pass after 512)', 'prefill chunk gpu us', p.get('prefill_chunk_gpu_total_us'))
for k, v in p['prefill_chunk'].items(): print('  ', k, v['dispatches'], v['gpu_us'])"
done
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_gemm8.py -k "not chromium and not browser and not smollm2" > $OUT/pytest.txt 2>&1; tail -2 $OUT/pytest.txt
