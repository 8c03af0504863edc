# H200 call 0 (session 4): timestamp profiles of main at 1B and 135M (where the GPU time goes), decode attention
# at longer prompts.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 128 --repeats 2"
for s in llama-3.2-1b smollm2-135m; do
  timeout 120 $B --prompt-tokens 512 --synthetic $s --profile > $OUT/profile-$s.json || echo "FAIL $s"
  python3 -c "
import json,sys; d=json.load(open('$OUT/profile-$s.json')); p=d['profile']
print('$s', 'prefill', d.get('prefill_tok_s'), 'decode', d.get('decode_tok_s'), {k:v for k,v in p.items() if 'total' in k})
for part in ('decode','decode_head','prefill_chunk'):
    print(' ', part, {k:(v.get('gpu_us'), v['ms']) for k,v in p[part].items()})"
done
timeout 60 $B --prompt-tokens 2000 --chunk 512 --synthetic llama-3.2-1b --context 4096 > $OUT/1b-2000.json && grep -o '"decode_tok_s[^,]*' $OUT/1b-2000.json
