# H200 call 1 (session 5): split decode attention (flash-decoding ranges combined in the o_proj input load) against
# the unsplit kernel (CERA_WEB_ATTN_SPLIT=1) in the same call, the three shapes, two contexts; split counts at 1B;
# a profile at 1B; the int8 kernel tests.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 128 --repeats 2"
run() {  # tag args...: one JSON line a run into models.jsonl
  tag=$1; shift
  r=$(timeout 75 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'], d.get('auto_steps_last'), d.get('host_ms_per_token'))")"
}
for s in llama-3.2-1b smollm2-135m qwen2.5-1.5b; do
  for p in 512 1536; do
    CERA_WEB_ATTN_SPLIT=1 run "$s p$p split=1" --synthetic $s --prompt-tokens $p
    run "$s p$p split=default" --synthetic $s --prompt-tokens $p
  done
done
for n in 4 16 32; do CERA_WEB_ATTN_SPLIT=$n run "llama-3.2-1b p512 split=$n" --synthetic llama-3.2-1b --prompt-tokens 512; done
CERA_WEB_ATTN_SPLIT=1 timeout 60 $B --prompt-tokens 512 --synthetic llama-3.2-1b --profile > $OUT/profile-1b-split1.json
timeout 60 $B --prompt-tokens 512 --synthetic llama-3.2-1b --profile > $OUT/profile-1b.json
python3 - <<'PY'
import json, os
for f in ("profile-1b-split1.json", "profile-1b.json"):
    d = json.load(open(os.path.join(os.environ["OUT"], f)))
    print(f, {k: v for k, v in d.items() if "profile" in k or "decode" in k})
PY
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_matvec_q8.py tests/test_kernels.py \
  -k "not browser and not chromium and not smollm2" 2>&1 | tail -4 | tee $OUT/pytest.txt
