#!/bin/bash
# Session 15 (issue 31): speculative decoding on the H200. SmolLM2-135M-Instruct Q4_1 travels in three pieces
# (.spec/smol.00-.02, made here by `split -b 33000000 -d .assets/models/SmolLM2-135M-Instruct.Q4_1.gguf .spec/smol.`),
# one a call, each call following the last within the machine's idle time:
#   h200_s15_speculative.sh stash     (carry .spec/smol.00, then .spec/smol.01)
#   h200_s15_speculative.sh run       (carry .spec/smol.02 .gl .whl)
#   h200_s15_speculative.sh diverge   (likewise: h200_s15_diverge.py with the defaults, then without int8 prefill)
# run: the test file of speculative decoding on the NVIDIA adapter (exactness where verify runs the int8 prefill
# kernels and decode the int8 matrix-vector ones), then bench.speculative with prompt lookup (edit / code / prose chat
# tasks, plain against speculative, best of 3 each, in one process).
set -o pipefail
mkdir -p /tmp/spec && cp .spec/smol.* /tmp/spec/ && ls -la /tmp/spec
[ "$1" = stash ] && exit 0
cat /tmp/spec/smol.0* > /tmp/smol.gguf && sha256sum /tmp/smol.gguf
source docs/bench/scripts/h200_setup_main.sh
if [ "$1" = diverge ]; then
  python3 docs/bench/scripts/h200_s15_diverge.py /tmp/smol.gguf 256 | tee $OUT/h200-s15-diverge.json
  CERA_WEB_I8_PREFILL=0 python3 docs/bench/scripts/h200_s15_diverge.py /tmp/smol.gguf 256 \
    | tee $OUT/h200-s15-diverge-no-i8-prefill.json
  exit 0
fi
python3 -m pytest tests/test_speculative.py -q -p no:cacheprovider 2>&1 | tee $OUT/h200-s15-pytest-speculative.txt
python3 -m cera_web bench --model /tmp/smol.gguf --lookup --decode-tokens 256 --repeats 3 --context 2048 \
  | tee $OUT/h200-s15-speculative-lookup-smollm2.json
