#!/bin/bash
# Session 18 on the H200 (issue 31): prompt lookup on the real Qwen2.5-Coder-1.5B-Instruct Q4_K_M (the edit, code and
# prose tasks of `bench --lookup`, each with lookup off and on in one run), natively (wgpu-py).
#   h200_s18_lookup.sh stash   carry [".spec/q15.NN"]: one 50 MB piece a call
#                              (`split -b 50M -d .assets/models/qwen2.5-coder-1.5b-instruct-Q4_K_M.gguf .spec/q15.`)
#   h200_s18_lookup.sh run     carry [".gl", ".whl", ".spec/q15.LAST"]
set -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p /opt/spec $OUT; cp .spec/q15.* /opt/spec/ 2>/dev/null; echo "pieces: $(ls /opt/spec | wc -l)"
[ "$1" = stash ] && exit 0
test "$1" = run || { echo "usage: h200_s18_lookup.sh stash | run"; exit 2; }
. docs/bench/scripts/h200_setup_main.sh
Q15=/tmp/q15.gguf
cat /opt/spec/q15.* > $Q15 && sha256sum $Q15 | tee $OUT/h200-s18-q15-sha256.txt
timeout 400 python3 -m cera_web bench --model $Q15 --lookup --decode-tokens 256 --repeats 2 --context 2048 \
  | tee $OUT/h200-s18-lookup-q15.json | cut -c1-2000
