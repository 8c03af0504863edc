# H200 call 3 (session 10): matmul_i8's Q4_K blocks read as vec4s (HEAD) against ca106da (.dev_ca1: 12 word loads
# a block), same call: the Q4_K GEMMs, 1B Q4_K_M end to end (alternating) and its profile; the prefill attention at
# heads of 128 (attention.wgsl: Qwen2.5-1.5B's 12/2, a Qwen3-like 16/8) beside 1B's 64; Qwen2.5-1.5B's profile.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 16 --repeats 2 --prompt-tokens 512"
run() {
  which=$1; tag=$2; shift 2
  if [ $which = ca1 ]; then r=$(cd .dev_ca1 && PYTHONPATH=/tmp/site:$PWD timeout 90 $B "$@"); else r=$(timeout 90 $B "$@"); fi \
    || { echo "FAIL $which $tag"; return; }
  echo "{\"code\": \"$which\", \"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$which $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['prefill_tok_s_runs'], d['decode_tok_s'])")"
}
K=cera_web.bench_kernels
(cd .dev_ca1 && PYTHONPATH=/tmp/site:$PWD timeout 60 python3 -m $K --gemm --types Q4_K --tiles '64,64,1' 2>&1 >/dev/null | grep matmul_i8 | sed 's/^/before /') | tee -a $OUT/gemm.txt
timeout 60 python3 -m $K --gemm --types Q4_K --tiles '64,64,1' 2>&1 >/dev/null | grep matmul_i8 | sed 's/^/after /' | tee -a $OUT/gemm.txt
for p in 0 3584; do
  for a in 12:2 16:8; do timeout 60 python3 -m $K --attention $a --head-dim 128 --gemm 512 --pos0 $p 2>&1 >/dev/null | tee -a $OUT/attn.txt; done
  timeout 60 python3 -m $K --attention 32:8 --gemm 512 --pos0 $p 2>&1 >/dev/null | tee -a $OUT/attn.txt
done
timeout 100 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen"
for i in 1 2 3; do
  run ca1 1b-q4km --synthetic llama-3.2-1b --quant q4_k_m
  run head 1b-q4km --synthetic llama-3.2-1b --quant q4_k_m
done
timeout 90 python3 -m cera_web bench --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 512 --decode-tokens 16 --profile > $OUT/profile_1b_q4km.json 2>/dev/null || echo "FAIL profile"
timeout 120 python3 -m cera_web bench --synthetic qwen2.5-1.5b --prompt-tokens 512 --decode-tokens 16 --profile > $OUT/profile_qwen.json 2>/dev/null || echo "FAIL profile qwen"
python3 - <<'PY'
import json, os
for name in ("profile_1b_q4km", "profile_qwen"):
    try:
        d = json.load(open(os.path.join(os.environ["OUT"], name + ".json")))
    except Exception as e:
        print(name, "missing", e); continue
    p = d["profile"]
    print(name, d["prefill_tok_s"], "chunk ms", p.get("prefill_chunk_total_ms"),
          {k: round(v["ms"], 3) for k, v in p["prefill_chunk"].items()})
PY
