# H200 call 3 (session 4): decode attention with eight value loads in flight (main) vs .dev_base, GPU time by
# timestamps, at 512 and 2,000 prompt tokens.
. docs/bench/scripts/h200_setup_main.sh
for s in smollm2-135m llama-3.2-1b; do
  for d in .dev_base .; do
    (cd $d && timeout 60 python3 -m cera_web bench --prompt-tokens 512 --decode-tokens 64 --repeats 2 --synthetic $s --profile > $OUT/p.json)
    python3 -c "import json; d=json.load(open('$OUT/p.json')); p=d['profile']; print('$s', '$d', d['prefill_tok_s'], d['decode_tok_s'], 'attention decode us', p['decode']['attention'].get('gpu_us'), 'prefill', p['prefill_chunk']['attention'].get('gpu_us'))"
  done
done
