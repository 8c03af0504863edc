# H200 final call (session 8): session 7's last commit (6fe6c5e, .dev_s7) against this session's code (HEAD), same
# call, three processes each (medians in BENCHMARKS.md): the three shapes and Q4_K_M at 1B (prefill 512, decode 128),
# 1B decode late in a long prompt; the bandwidth table; the prefill GEMMs; prefill attention; profiles; kernel tests.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 128 --repeats 2"
run() {  # which tag args...: one JSON line a run into models.jsonl
  which=$1; tag=$2; shift 2
  if [ $which = s7 ]; then r=$(cd .dev_s7 && PYTHONPATH=/tmp/site:$PWD timeout 60 $B "$@"); else r=$(timeout 60 $B "$@"); fi \
    || { echo "FAIL $which $tag"; return; }
  echo "{\"code\": \"$which\", \"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$which $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'])")"
}
for a in "smollm2-135m q4_1" "llama-3.2-1b q4_1" "qwen2.5-1.5b q4_1" "llama-3.2-1b q4_k_m"; do
  set -- $a
  timeout 120 python3 -m cera_web bench --synthetic $1 --quant $2 --prompt-tokens 16 --decode-tokens 4 > /dev/null || echo "FAIL gen $a"
done
for i in 1 2 3; do
  for s in smollm2-135m llama-3.2-1b qwen2.5-1.5b; do
    for w in s7 s8; do run $w "$s q4_1" --synthetic $s --prompt-tokens 512; done
  done
  for w in s7 s8; do run $w "llama-3.2-1b q4_k_m" --synthetic llama-3.2-1b --quant q4_k_m --prompt-tokens 512; done
done
for w in s7 s8; do run $w "llama-3.2-1b q4_1 after 3584" --synthetic llama-3.2-1b --prompt-tokens 512 --context 4096 --decode-after 3584; done
timeout 100 python3 -m cera_web.bench_kernels --types Q4_1,Q8_0,Q4_K,Q6_K --shapes 4096x4096,14336x4096 --repeats 5 \
  > $OUT/kernels.json 2>/dev/null || echo "FAIL kernels"
python3 -c "
import json; d=json.load(open('$OUT/kernels.json')); print('peak', d['peak_read_gbps'])
for r in d['results']: print(r['type'], r['shape'], r.get('kernel'), r.get('layout'), r['gbps'], r.get('of_read'))"
timeout 80 python3 -m cera_web.bench_kernels --gemm --types Q4_1,Q8_0,Q4_K > $OUT/gemm.json 2>$OUT/gemm.txt || echo "FAIL gemm"
grep matmul_i8 $OUT/gemm.txt
timeout 60 python3 -m cera_web.bench_kernels --attention 9:3,32:8,12:2 > $OUT/attention.json 2>$OUT/attention.txt || echo "FAIL attention"
grep attention $OUT/attention.txt
for s in smollm2-135m llama-3.2-1b; do
  timeout 60 python3 -m cera_web bench --synthetic $s --prompt-tokens 512 --decode-tokens 16 --profile > $OUT/profile_$s.json || echo "FAIL $s"
  python3 -c "
import json; d=json.load(open('$OUT/profile_$s.json')); p=d['profile']
print('$s profile (a pass after 512)', 'prefill chunk gpu us', p.get('prefill_chunk_gpu_total_us'))
for k, v in p['prefill_chunk'].items(): print('  ', k, v['dispatches'], v['gpu_us'])"
done
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_gemm8.py tests/test_aligned.py tests/test_matvec_q8.py \
  tests/test_kernels.py -k "not chromium and not browser and not smollm2" > $OUT/pytest.txt 2>&1; tail -3 $OUT/pytest.txt
