#!/bin/bash
# Session 20 on the H200: speculative decoding natively and in the page on the real Qwen2.5-Coder pair (issue 31),
# and the decode attention's loops late in a context (issue 26). Trees compared in one call, each a
# `git archive COMMIT cera_web shaders` unpacked into .before, .mid or .mid2 (before, mid, mid2), or the checkout
# (after); each runs from its own folder (python -m puts the working directory ahead of PYTHONPATH).
#   stash   one piece a call: .spec/q15.NN (the 1.5B, 22 pieces), .spec/q05.NN (the 0.5B, 8 pieces) go to /opt/spec;
#           .pg/pg.tar.xz.NN (the page pack, docs/bench/scripts/h200_page_gpu.sh) to /opt/pgparts
#           (`split -b 50M -d .assets/models/qwen2.5-coder-1.5b-instruct-Q4_K_M.gguf .spec/q15.`, the same with
#           qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf and .spec/q05.)
#   spec    natively: `bench --lookup` on the 1.5B for SPEC_TREES (default "before after"), then `bench --draft` with
#           the 0.5B for SPEC_DRAFT_TREES (default "after"; SPEC_DRAFT=0: none)          -> $TAG-spec.jsonl
#   long    decode after LONG_AFTER tokens (default "3584 16") at the synthetic LONG_SHAPES (default 1B and 1.5B,
#           Q4_K_M) for LONG_TREES (default "after mid mid2")                           -> $TAG-long.jsonl
#   The page: h200_page_gpu.sh's step `spec` (the same pieces, joined there).
# Carry for spec / long: [".gl", ".whl", ".before", ".mid", ".mid2", ".spec/q05.LAST"] (what the trees need).
# TAG (default h200-s20) names the outputs; LONG_ARGS adds arguments to the long step's runs (e.g. --profile).
set -o pipefail
OUT=${OUT:-/tmp/out}
TAG=${TAG:-h200-s20}
mkdir -p /opt/spec /opt/pgparts $OUT
cp .spec/q*.* /opt/spec/ 2>/dev/null; cp .pg/pg.tar.xz.* /opt/pgparts/ 2>/dev/null
echo "pieces: $(ls /opt/spec | wc -l) model, $(ls /opt/pgparts | wc -l) page"
[ "$1" = stash ] && exit 0
. docs/bench/scripts/h200_setup_main.sh
tree() { case $1 in before) echo $PWD/.before ;; mid) echo $PWD/.mid ;; mid2) echo $PWD/.mid2 ;; *) echo $PWD ;; esac; }
bench() {   # TREE OUTFILE LIMIT_S ARGS...
  local t=$1 o=$2 lim=$3; shift 3
  echo "== $t: bench $*"
  (cd $(tree $t) && PYTHONPATH=/tmp/site:$PWD timeout $lim python3 -m cera_web bench "$@" > /tmp/b.json; echo "rc=$?")
  python3 -c "import json; d=json.load(open('/tmp/b.json')); d['tree']='$t'; d['args']='$*'
d['code']=__import__('subprocess').run(['python3','-c','import cera_web,sys;print(cera_web.__file__)'],cwd='$(tree $t)',
  capture_output=True,text=True).stdout.strip()
print(json.dumps(d))" >> $OUT/$o && tail -n1 $OUT/$o | cut -c1-1500
}
join() {    # PREFIX FILE: the pieces /opt/spec/PREFIX.* joined once, and their sha256
  [ -f $2 ] || cat /opt/spec/$1.* > $2
  sha256sum $2 | tee -a $OUT/$TAG-sha256.txt
}
case $1 in
spec)
  Q15=/tmp/q15.gguf Q05=/tmp/q05.gguf
  join q15 $Q15
  for t in ${SPEC_TREES:-before after}; do
    bench $t $TAG-spec.jsonl 200 --model $Q15 --lookup --decode-tokens 256 --repeats 2 --context 2048
  done
  if [ "${SPEC_DRAFT:-1}" = 1 ]; then
    join q05 $Q05
    for t in ${SPEC_DRAFT_TREES:-after}; do
      bench $t $TAG-spec.jsonl 250 --model $Q15 --draft $Q05 --decode-tokens 256 --repeats 2 --context 2048
    done
  fi ;;
long)
  for sh in ${LONG_SHAPES:-llama-3.2-1b qwen2.5-1.5b}; do
    for a in ${LONG_AFTER:-3584 16}; do
      for t in ${LONG_TREES:-after mid mid2}; do
        bench $t $TAG-long.jsonl 150 --synthetic $sh --quant q4_k_m --prompt-tokens $a --decode-after $a \
          --decode-tokens 128 --context 4096 --repeats 2 $LONG_ARGS
      done
    done
  done ;;
*) echo "usage: h200_s20.sh stash | spec | long"; exit 2 ;;
esac
