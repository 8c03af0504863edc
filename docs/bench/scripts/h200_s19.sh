#!/bin/bash
# Session 19 on the H200, natively (wgpu-py): trees compared in one call, each a `git archive COMMIT cera_web shaders`
# unpacked into .before or .mid (before, mid), or the checkout (after):
#   lookup  issue 31: prompt lookup on the real Qwen2.5-Coder-1.5B-Instruct Q4_K_M (bench --lookup: its chat tasks,
#           off and on in one run, and verify_cost) for LOOKUP_TREES (default "before after"), then verify_cost at
#           the synthetic 1B and 1.5B shapes (LOOKUP_SYNTH= : none)
#   long    issue 26: decode after LONG_AFTER tokens (default 3584) at the synthetic LONG_SHAPES (default 1B and 1.5B,
#           Q4_K_M) for LONG_TREES (default "after"), with the split decode attention's ranges LONG_RANGES (RANGE or
#           RANGE:SPLIT: CERA_WEB_ATTN_RANGE / CERA_WEB_ATTN_SPLIT; default "256 128 64"); LONG_SHORT=1: also after 16
# Each JSON line records its tree, arguments, switches and the package that ran (`code`).
# Usage:
#   h200_s19.sh stash          carry [".spec/q15.NN"]: one 50 MB piece a call
#                              (`split -b 50M -d .assets/models/qwen2.5-coder-1.5b-instruct-Q4_K_M.gguf .spec/q15.`)
#   h200_s19.sh lookup|long    carry [".gl", ".whl", ".before", ".mid", ".spec/q15.LAST"] (what the trees need)
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p /opt/spec $OUT; cp .spec/q15.* /opt/spec/ 2>/dev/null; echo "pieces: $(ls /opt/spec | wc -l)"
[ "$1" = stash ] && exit 0
. docs/bench/scripts/h200_setup_main.sh
# the trees: before = .before, mid = .mid, after = the checkout; each runs from its own folder (python -m puts the
# working directory first on sys.path, ahead of PYTHONPATH)
tree() { case $1 in before) echo $PWD/.before ;; mid) echo $PWD/.mid ;; *) echo $PWD ;; esac; }
bench() {   # TREE OUTFILE LIMIT_S ARGS...
  local t=$1 o=$2 lim=$3; shift 3
  echo "== $t: bench $*"
  (cd $(tree $t) && PYTHONPATH=/tmp/site:$PWD timeout $lim python3 -m cera_web bench "$@" > /tmp/b.json; echo "rc=$?")
  python3 -c "import json,os; d=json.load(open('/tmp/b.json')); d['tree']='$t'; d['args']='$*'
d['attn_range']=os.environ.get('CERA_WEB_ATTN_RANGE'); d['attn_split']=os.environ.get('CERA_WEB_ATTN_SPLIT')
d['code']=__import__('subprocess').run(['python3','-c','import cera_web,sys;print(cera_web.__file__)'],cwd='$(tree $t)',
  capture_output=True,text=True).stdout.strip()
print(json.dumps(d))" \
    >> $OUT/$o && tail -n1 $OUT/$o | cut -c1-1200
}
case $1 in
lookup)
  Q15=/tmp/q15.gguf
  cat /opt/spec/q15.* > $Q15 && sha256sum $Q15 | tee $OUT/h200-s19-q15-sha256.txt
  for t in ${LOOKUP_TREES:-before after}; do
    bench $t h200-s19-lookup-q15.jsonl 200 --model $Q15 --lookup --decode-tokens 256 --repeats 2 --context 2048
  done
  for sh in ${LOOKUP_SYNTH-llama-3.2-1b qwen2.5-1.5b}; do      # LOOKUP_SYNTH= : none
    for t in ${LOOKUP_TREES:-before after}; do
      bench $t h200-s19-verify-synth.jsonl 150 --synthetic $sh --quant q4_k_m --lookup --decode-tokens 8 --context 2048
    done
  done ;;
long)    # LONG_SHAPES, LONG_RANGES (RANGE or RANGE:SPLIT), LONG_AFTER, LONG_TREES: shapes, ranges, prompt lengths,
         # trees (default both shapes, 256 128 64, 3584, after)
  for sh in ${LONG_SHAPES:-llama-3.2-1b qwen2.5-1.5b}; do
    for a in ${LONG_AFTER:-3584}; do
    for rs in ${LONG_RANGES:-256 128 64}; do
    for t in ${LONG_TREES:-after}; do
      r=${rs%%:*}; sp=; [ "$r" != "$rs" ] && sp=${rs#*:}
      CERA_WEB_ATTN_RANGE=$r CERA_WEB_ATTN_SPLIT=$sp bench $t h200-s19-long.jsonl 150 --synthetic $sh --quant q4_k_m \
        --prompt-tokens $a --decode-after $a --decode-tokens 128 --context 4096 --repeats 2
    done
    done
    done
    [ -n "$LONG_SHORT" ] && bench after h200-s19-long.jsonl 150 --synthetic $sh --quant q4_k_m --decode-tokens 128 \
      --context 4096 --repeats 2
  done ;;
*) echo "usage: h200_s19.sh stash | lookup | long"; exit 2 ;;
esac
