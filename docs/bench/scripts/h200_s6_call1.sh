# H200 call 1 (session 6): where decode products lose their bandwidth, and whether f16 arithmetic is faster.
# - fma_micro: float32 vs float16 FMA throughput through naga (packed half FMAs?)
# - matvec_q8 variants (CERA_WEB_EXP): "" today's; nodot: dot4I8Packed replaced by a xor (wrong sums, tells the cost
#   of naga's emulated dot product); blk: a whole Q4_1 block an item (raw layout); split: weights repacked as scales
#   then 16-byte-aligned integers (vec4 loads); split,nodot.
# - the 1B model's decode with blk (raw layout, correct) and nodot (timing only).
# Ran on uncommitted experiment code: the format files in scripts/s6_call1_formats/, a CERA_WEB_EXP switch in
# kernels.matvec_q8 choosing them (and a per-block xs = dx * sum(q) array in matvec_q8.wgsl that they read).
. docs/bench/scripts/h200_setup_main.sh
python3 docs/bench/scripts/fma_micro.py 4096 | tee $OUT/fma.json
K="python3 -m cera_web.bench_kernels --types Q4_1,Q8_0 --shapes 4096x4096,14336x4096,2048x2048,16384x2048,2048x8192 --repeats 5"
for e in base nodot blk split split,nodot; do
  CERA_WEB_EXP=$e timeout 100 $K > $OUT/kern_$e.json || echo "FAIL kern $e"
  python3 -c "
import json; d=json.load(open('$OUT/kern_$e.json'))
print('$e', [(r['type'], r['shape'], r.get('kernel','f32'), r['gbps']) for r in d['results'] if r.get('kernel')=='matvec_q8'])"
done
CERA_WEB_EXP=split timeout 100 $K --variants8 "lanes=4,wg=256,sg=1;lanes=8,wg=256,sg=1;lanes=16,wg=256,sg=1;lanes=32,wg=256,sg=1;lanes=8,wg=128,sg=1" > $OUT/kern_split_lanes.json || echo "FAIL lanes"
python3 -c "
import json; d=json.load(open('$OUT/kern_split_lanes.json'))
print('lanes', [(r['type'], r['shape'], r['lanes'], r['wg'], r['gbps']) for r in d['results'] if r.get('kernel')=='matvec_q8'])"
B="python3 -m cera_web bench --synthetic llama-3.2-1b --prompt-tokens 16 --decode-tokens 128 --repeats 2"
for e in base blk nodot base; do
  r=$(CERA_WEB_EXP=$e timeout 90 $B) || { echo "FAIL bench $e"; continue; }
  echo "{\"exp\": \"$e\", \"run\": $r}" >> $OUT/bench.jsonl
  echo "bench $e $(echo "$r" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['decode_tok_s'])")"
done
