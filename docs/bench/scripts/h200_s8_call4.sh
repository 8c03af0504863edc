# H200 call 4 (session 8): HEAD (K groups at most 2) with quantize_rows' workgroup size and the K groups forced other
# ways, to pick the defaults; SmolLM2 and 1B, prefill 512.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 32 --repeats 3 --prompt-tokens 512"
run() {  # tag args...: one JSON line a run into models.jsonl
  tag=$1; shift
  r=$(timeout 60 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"code\": \"head\", \"tag\": \"$tag\", \"env\": \"$CERA_WEB_QUANTIZE_WG/$CERA_WEB_I8_KG\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'])")"
}
for a in "smollm2-135m q4_1" "llama-3.2-1b q4_1"; do
  set -- $a
  timeout 120 python3 -m cera_web bench --synthetic $1 --quant $2 --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen $a"
done
for i in 1 2; do
  run "smollm2-135m default" --synthetic smollm2-135m
  for q in 128 256; do CERA_WEB_QUANTIZE_WG=$q run "smollm2-135m qwg$q" --synthetic smollm2-135m; done
  CERA_WEB_I8_KG=1 run "smollm2-135m kg1" --synthetic smollm2-135m
  CERA_WEB_ATTN_SPLIT=1 run "smollm2-135m attn1" --synthetic smollm2-135m
  run "llama-3.2-1b default" --synthetic llama-3.2-1b
  CERA_WEB_QUANTIZE_WG=256 run "llama-3.2-1b qwg256" --synthetic llama-3.2-1b
done
