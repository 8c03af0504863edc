# H200 call 1 (session 3): matrix-vector variants, then synthetic models with the old and new decode shapes.
. docs/bench/scripts/h200_setup.sh
B="python3 -m cera_web bench --prompt-tokens 512 --decode-tokens 128 --repeats 3"
timeout 200 python3 -m cera_web.bench_kernels --types Q4_1,Q8_0,Q4_K,Q6_K,F16 --shapes 4096x4096,14336x4096 \
  --repeats 5 --target-ms 10 --no-serial \
  --variants "rpt=1,wg=64,sg=0;rpt=1,wg=64,sg=1;rpt=2,wg=64,sg=1;rpt=4,wg=64,sg=1;rpt=2,wg=128,sg=1;rpt=4,wg=256,sg=1" \
  > $OUT/kernels.json 2> $OUT/kernels.txt; tail -62 $OUT/kernels.txt
run() {  # tag, then bench arguments; one JSON line a run into models.jsonl
  tag=$1; shift
  r=$(timeout 120 $B "$@") || { echo "FAIL $tag"; return; }
  echo "{\"tag\": \"$tag\", \"run\": $r}" >> $OUT/models.jsonl
  echo "$tag $(echo "$r" | grep -o '"steps_per_read.*api')"
}
for s in smollm2-135m llama-3.2-1b; do
  for v in "rpt=1,wg=64,sg=0" "rpt=1,wg=64,sg=1" "rpt=2,wg=64,sg=1" "rpt=4,wg=128,sg=1"; do
    CERA_WEB_MATVEC=$v run "$s $v spr16" --synthetic $s --steps-per-read 16
  done
  run "$s default auto" --synthetic $s
done
