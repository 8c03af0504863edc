# H200 call 1 (session 7): the aligned layout of Q4_1/Q8_0 (default) against the file's (CERA_WEB_ALIGNED=0), same
# code, same call: the three shapes, and the matrix-vector bandwidth at both layouts; a probe of where a decode step's
# time goes (s7_probe.py); the kernel tests on this GPU.
. docs/bench/scripts/h200_setup_main.sh
B="python3 -m cera_web bench --decode-tokens 128 --repeats 2"
run() {  # layout tag args...: one JSON line a run into models.jsonl
  layout=$1; tag=$2; shift 2
  r=$(CERA_WEB_ALIGNED=$layout timeout 60 $B "$@") || { echo "FAIL $layout $tag"; return; }
  echo "{\"aligned\": $layout, \"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "aligned=$layout $tag $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['prefill_tok_s'], d['decode_tok_s'], d['host_ms_per_token'], d.get('auto_steps_last'))")"
}
for s in llama-3.2-1b smollm2-135m qwen2.5-1.5b; do
  for a in 0 1; do run $a "$s q4_1" --synthetic $s --prompt-tokens 512; done
done
timeout 120 python3 docs/bench/scripts/s7_probe.py /tmp/cera_web_synthetic/v2-smollm2-135m-q4_1.gguf \
  /tmp/cera_web_synthetic/v2-llama-3.2-1b-q4_1.gguf > $OUT/probe.json || echo "FAIL probe"
cat $OUT/probe.json
timeout 150 python3 -m cera_web.bench_kernels --types Q4_1,Q8_0 --shapes 4096x4096,14336x4096,16384x2048,2048x8192,128256x2048 \
  --repeats 5 > $OUT/kernels.json 2>/dev/null || echo "FAIL kernels"
python3 -c "
import json; d=json.load(open('$OUT/kernels.json')); print('peak', d['peak_read_gbps'])
for r in d['results']: print(r['type'], r['shape'], r.get('kernel'), r.get('layout'), r.get('lanes'), r['gbps'], r.get('of_read'))"
timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_aligned.py tests/test_matvec_q8.py -k "not chromium and not smollm2 and not engine" > $OUT/pytest.txt 2>&1; tail -3 $OUT/pytest.txt
