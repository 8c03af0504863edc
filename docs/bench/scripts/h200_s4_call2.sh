# H200 call 2 (session 4): prefill attention with one exp a key (main) vs before (.dev_base), same call.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --prompt-tokens 512 --decode-tokens 64 --repeats 3"
for s in smollm2-135m llama-3.2-1b; do
  for d in .dev_base . .dev_base .; do
    r=$(cd $d && timeout 90 $B --synthetic $s) && echo "$s $d $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'])")"
  done
done
(cd .dev_base && timeout 60 $B --synthetic smollm2-135m --profile > $OUT/profile-base.json)
timeout 60 $B --synthetic smollm2-135m --profile > $OUT/profile-exp.json
for f in base exp; do python3 -c "import json; p=json.load(open('$OUT/profile-$f.json'))['profile']['prefill_chunk']; print('$f', {k: v.get('gpu_us') for k, v in p.items()})"; done
