#!/bin/bash
# The page in Chromium on the H200's GPU under a carried Xvfb (issue 26), and the preflight's speed estimates against
# what the page and the native engine measure (issue 30 item 3). One script for what sessions 13 and 15 ran as
# h200_s13_page.sh / h200_s15_page.sh (merged in session 16; the old runs' settings are below), parametrized:
#   PG_MODELS   files of .assets/models carried in the pack (default: SmolLM2-135M-Instruct.Q4_1.gguf); the page,
#               page512 and native steps run the first; estimate, long and chat every one (estimate and synth also
#               the PG_SYNTH shapes)
#   PG_PROBE    "one" (default: the flag set that gave the NVIDIA adapter in sessions 13 and 15, all sets if it
#               fails) or "all" (every flag set, as session 13)
#   PG_STEPS    the steps of `run`, in order (default "probe estimate"): probe, page (128 prompt / 128 decode
#               tokens), page512 (512 / 128), native (`python -m cera_web bench`, 512/128 and 128/128, 3 repeats),
#               wllama (needs .pgb/wllama-*.tgz; PG_WLLAMA files, default PG_MODELS and the synthetic files made
#               this call; with the probe's f16 flag set when it gave shader-f16), estimate (below), and for issue 26's remaining measures (session
#               17), each over every PG_MODELS file:
#                 p512   prefill of 512 tokens, decode after 16: page and native, best of 3 each  -> p512.jsonl
#                 long   decode after 3,584 tokens: page and native, --prompt-tokens 3584 --decode-after 3584
#                        --decode-tokens 128 --context 4096 (native 2 repeats)             -> long.jsonl
#                 chat   the real page (bench_browser.py --app): load from a download, reload from OPFS, then
#                        one-line chat messages (Send to first token); native `bench --chat` -> app.jsonl, chat.jsonl
#                 synth  makes the PG_SYNTH shapes (Q4_K_M), serves them from .assets/models, and runs on each the
#                        page and native at 512/128 (decode after 16) and the long case, and the real page's
#                        download / OPFS loads (no chat: no template; estimate has their 128/64) -> synth.jsonl,
#                        app.jsonl
#                 spec   (session 20) speculative decoding (prompt lookup, the 0.5B draft) on the real
#                        Qwen2.5-Coder-1.5B, page and native (the pieces from h200_s20.sh stash) -> spec.jsonl
#                 sgmat  (session 18) gemm_check in the page, then prefill 512 with the subgroup matrix kernel
#                        (CERA_WEB_SGMAT=1; PG_SGMAT_ENVS: its other shapes) and without (the int8 path) on the
#                        synthetic files and the first PG_MODELS file -> sgmat.jsonl
#               The estimate step now runs the synthetic files first, then PG_MODELS; PG_ESTIMATE=models or synth
#               runs only those (default all). To merge two calls' estimates into one predicted.json:
#                 cat OUT1/estimate.jsonl OUT2/estimate.jsonl > e.jsonl && python3 h200_page_gpu.py predicted e.jsonl
#   PG_UNTIL    a step (or a model's part of one) that would start after this many seconds is skipped (default 540)
#   PG_DEADLINE every command's timeout is cut so that it ends by this many seconds after the start (default 570):
#               with PG_UNTIL it keeps a call under the device's 600 s
#   PG_SYNTH    the synthetic shapes of the synth and estimate steps (default "llama-3.2-1b qwen2.5-1.5b", Q4_K_M;
#               "" for none); made once per machine start (kept in /tmp/cera_web_synthetic while it is warm)
# Session 13 (SmolLM2, docs/bench/h200-s13-page*): PG_PROBE=all PG_STEPS="probe page native wllama page512".
# Session 15 (Gemma 3 270M / Qwen 0.5B, docs/bench/h200-s15-page*): PG_MODELS=<the one file>
#   PG_STEPS="probe page page512 native page page512 native page page512 native page page512" PG_UNTIL=330.
#
# The estimate step (issue 30): for each model, tests/bench_browser.py (the page's engine, 128/64 tokens, best of 3) and the
# native bench (128/64, 3 repeats) both print the preflight's estimate ("estimate": cera_web/preflight.py, from the
# micro-benchmark of the same device and the model's bytes and operations a token) beside what they measured; then
# `h200_page_gpu.py predicted` writes $OUT/predicted.json: per model and engine, predicted and measured decode and
# prefill tok/s, their ratio and whether it is within ±35%. The PG_SYNTH shapes are made there
# (bench.synthetic_path) and served to the page from .assets/models.
#
# Here, once, in the repository root (all outputs git-ignored):
#   PG_MODELS="SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-Q4_K_M.gguf qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf" \
#     PG_NO_WLLAMA=1 sh docs/bench/scripts/pack_chromium.sh 53
#                                             # .pg/pg.tar.xz.00..NN (the models inside), .gl, .whl, .pgb (src.tar.xz)
#   sh docs/bench/scripts/pack_xvfb.sh        # .xv/xv.tar.xz
# Then one device call per piece, each right after the last (the machine stays warm; /opt stays while held):
#   calls 1..N-1: carry [".pg/pg.tar.xz.0K"]                         command: bash docs/bench/scripts/h200_page_gpu.sh stash
#   call N: carry [".pg/pg.tar.xz.LAST", ".gl", ".whl", ".pgb", ".xv"]
#           command: PG_MODELS="<the same list>" bash docs/bench/scripts/h200_page_gpu.sh run N
# Writes to $OUT: env.txt, xvfb.log, probe.json, page.jsonl, native.jsonl, wllama.jsonl, estimate.jsonl,
# predicted.json, long.jsonl, app.jsonl, chat.jsonl, synth.jsonl, chromium.log and log.txt. Each line of the new
# .jsonl files is a bench's JSON with "engine" (page / native), "file" and "args" added (h200_page_gpu.py tag).
#
# Session 17's run (issue 26's remaining measures; the lead's plan, about 9 minutes of run time in two calls).
# After committing the code to measure, pack from that commit (src.tar.xz is `git archive HEAD`: the code measured):
#   PG_MODELS="SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-Q4_K_M.gguf qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf" \
#     PG_NO_WLLAMA=1 sh docs/bench/scripts/pack_chromium.sh 53 ;  sh docs/bench/scripts/pack_xvfb.sh
# (only the code changed since a pack: `sh docs/bench/scripts/pack_chromium.sh src` remakes .pgb/src.tar.xz alone)
#   calls 1..N-1 (one a piece): carry [".pg/pg.tar.xz.0K"]  command: bash docs/bench/scripts/h200_page_gpu.sh stash
#   call N, run 1 (expected about 275 s: unpack ~35, probe ~20 with the two f16 flag sets, long ~60, chat ~95,
#     estimate ~65 over the three real files):
#     carry [".pg/pg.tar.xz.LAST", ".gl", ".whl", ".pgb", ".xv"]   timeout_s 300
#     command: PG_MODELS="SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-Q4_K_M.gguf qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf" PG_STEPS="probe long chat estimate" PG_ESTIMATE=models PG_UNTIL=250 PG_DEADLINE=280 bash docs/bench/scripts/h200_page_gpu.sh run N
#   call N+1, run 2, right after (the pieces and the unpacked browser stay while the machine is warm; expected about
#     280 s: unpack and probe ~10, making both synthetic files ~50, synth ~95 a file, estimate ~45 over the two):
#     carry [".gl", ".whl", ".pgb", ".xv"]   timeout_s 300
#     command: PG_MODELS="<the same three>" PG_PROBE_F16=0 PG_STEPS="probe estimate synth" PG_ESTIMATE=synth PG_UNTIL=250 PG_DEADLINE=280 bash docs/bench/scripts/h200_page_gpu.sh run N
#   (at most 560 s of run time in all; what would start past PG_UNTIL is skipped and said so in log.txt, so each
#   call's order is its priority; with more device time left, raise PG_UNTIL / PG_DEADLINE. predicted.json of call 2
#   covers both synthetic shapes, call 1's the real files: merge them as said under PG_ESTIMATE)
# If the machine was given back between the two calls, the pieces are gone: stash them again first.
set -u
OUT=${OUT:-/tmp/pg_out}
mkdir -p $OUT /opt/pgparts
cp -n .pg/*.tar.xz.* /opt/pgparts/ 2>/dev/null
echo "pieces on the machine: $(ls /opt/pgparts | tr '\n' ' ')"
if [ "${1:-}" = stash ]; then
  { date -u; uname -a; head -3 /etc/os-release; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    ls /usr/local/nvidia/share/vulkan/icd.d; ldconfig -p | grep -E 'libX11.so|libxcb.so|libXfont2|libxkbfile|libunwind|libpixman'
    which Xvfb xkbcomp 2>&1; ls /usr/share/X11/xkb 2>&1 | head -3; df -h /opt | tail -1; } > $OUT/env.txt 2>&1
  exit 0
fi
test "${1:-}" = run || { echo "usage: h200_page_gpu.sh stash | run N"; exit 2; }
N=${2:-5}
STEPS=${PG_STEPS:-probe estimate}
UNTIL=${PG_UNTIL:-540}
MODELS=${PG_MODELS:-SmolLM2-135M-Instruct.Q4_1.gguf}
FIRST=${MODELS%% *}
SYNTH=${PG_SYNTH-llama-3.2-1b qwen2.5-1.5b}
DEADLINE=${PG_DEADLINE:-570}
test $(ls /opt/pgparts/pg.* | wc -l) -ge $N || { echo "missing pieces: have $(ls /opt/pgparts/pg.* | wc -l) of $N"; exit 1; }
exec > >(tee $OUT/log.txt) 2>&1
T0=$(date +%s)
t() { echo "== t=$(( $(date +%s) - T0 ))s $*"; }
late() { [ $(( $(date +%s) - T0 )) -gt $UNTIL ] && { t "$* skipped (past PG_UNTIL=$UNTIL s)"; return 0; }; return 1; }
tl() {      # a command's timeout: $1 seconds, or less so that it ends by PG_DEADLINE
  local r=$(( DEADLINE - ($(date +%s) - T0) )); [ $1 -lt $r ] && r=$1; [ $r -lt 1 ] && r=1; echo $r; }
set -x
R=$PWD
if [ ! -f /opt/pgx/.unpacked ]; then
  mkdir -p /opt/pgx && cat /opt/pgparts/pg.tar.xz.* | xz -dc -T0 | tar -x -C /opt/pgx && touch /opt/pgx/.unpacked || exit 1
fi
# The code measured: the commit packed in .pgb/src.tar.xz (git archive HEAD), not this checkout's working tree
# (others' edits in progress travel with it); this session's scripts are copied in from the checkout.
rm -rf /opt/pgsrc && mkdir -p /opt/pgsrc && xz -dc .pgb/src.tar.xz | tar -x -C /opt/pgsrc || exit 1
cp $R/docs/bench/scripts/h200_page.py $R/docs/bench/scripts/h200_page_gpu.py /opt/pgsrc/docs/bench/scripts/
cd /opt/pgsrc && cp -a /opt/pgx/.assets . || exit 1
echo "code: $(cat COMMIT)" | tee -a $OUT/env.txt
t unpacked
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $R/.whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:/opt/pgx/pg/site:$PWD
for f in $R/.gl/*.deb; do dpkg -x $f /; done; ldconfig
export XDG_RUNTIME_DIR=/tmp PYTHONUNBUFFERED=1 VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export VK_ICD_FILENAMES=$VK_DRIVER_FILES __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export __GLX_VENDOR_LIBRARY_NAME=nvidia
# Chromium's and Xvfb's libraries: link the bundled copy of each one the machine lacks (NSS and NSPR as one group).
have() { ldconfig -p | grep -q "^[[:space:]]*$1 "; }
link_missing() {    # FOLDER_OF_LIBS NEED_FOLDER
  mkdir -p $2
  for f in $1/*; do
    n=$(basename $f)
    case $n in
      libnss*|libsmime3*|libsoftokn3*|libfreebl*|libnspr4*|libplc4*|libplds4*) have libnss3.so || ln -sf $f $2/ ;;
      *) have $n || ln -sf $f $2/ ;;
    esac
  done
}
link_missing /opt/pgx/pg/lib /opt/pgx/need
echo "bundled libraries used: $(ls /opt/pgx/need | tr '\n' ' ')" | tee -a $OUT/env.txt
# Xvfb: unpacked to /opt/xv; xkbcomp is run from /usr/bin (compiled in), so a wrapper goes there if none is.
if [ ! -f /opt/xv/xv/bin/Xvfb ]; then mkdir -p /opt/xv && xz -dc $R/.xv/xv.tar.xz | tar -x -C /opt/xv || exit 1; fi
link_missing /opt/xv/xv/lib /opt/xv/need
XL=/opt/xv/need:/opt/pgx/need
echo "Xvfb libraries used: $(ls /opt/xv/need | tr '\n' ' ')" | tee -a $OUT/env.txt
test -x /usr/bin/xkbcomp || printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec /opt/xv/xv/bin/xkbcomp "$@"\n' $XL > /usr/bin/xkbcomp
chmod +x /usr/bin/xkbcomp
LD_LIBRARY_PATH=$XL ldd /opt/xv/xv/bin/Xvfb | grep 'not found'
if [ ! -S /tmp/.X11-unix/X99 ]; then
  LD_LIBRARY_PATH=$XL setsid /opt/xv/xv/bin/Xvfb :99 -screen 0 1280x1024x24 -nolisten tcp -xkbdir /opt/xv/xv/xkb \
    > $OUT/xvfb.log 2>&1 < /dev/null &
  for i in $(seq 50); do [ -S /tmp/.X11-unix/X99 ] && break; sleep 0.2; done
fi
ls -la /tmp/.X11-unix/; export DISPLAY=:99
export PG_CHROME_LOG=$OUT/chromium.log
cat > /opt/pgx/chromium <<'EOF'
#!/bin/bash
export LD_LIBRARY_PATH=/opt/pgx/need${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} FONTCONFIG_FILE=/opt/pgx/pg/fonts/fonts.conf
echo "=== $(date -u +%T) chromium $*" >> ${PG_CHROME_LOG:-/tmp/chromium.log}
exec /opt/pgx/pg/chromium/chromium "$@" 2>> ${PG_CHROME_LOG:-/tmp/chromium.log}
EOF
chmod +x /opt/pgx/chromium
LD_LIBRARY_PATH=/opt/pgx/need FONTCONFIG_FILE=/opt/pgx/pg/fonts/fonts.conf /opt/pgx/pg/chromium/chromium --version
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
S=docs/bench/scripts/h200_page_gpu.py
M=$PWD/.assets/models/$FIRST
for m in $MODELS; do echo "model: $(sha256sum .assets/models/$m) (check against assets.json)" | tee -a $OUT/env.txt; done
P=3
LONG="--prompt-tokens 3584 --decode-after 3584 --decode-tokens 128 --context 4096"
SFILES=""   # the synthetic files made (make_synth), in .assets/models
make_synth() {     # once a call: the PG_SYNTH shapes (Q4_K_M), written once a machine start, served from .assets/models
  [ -n "$SFILES" ] && return
  for sh in $SYNTH; do
    late "making $sh" && continue
    f=$(timeout $(tl 200) python3 -c "from cera_web.tools.bench import synthetic_path as p; print(p('$sh', 'q4_k_m'))") \
      && { ln -f $f .assets/models/ 2>/dev/null || cp $f .assets/models/; } && SFILES="$SFILES $(basename $f)"
    t "made $sh: $(ls -la .assets/models/v2-$sh-q4_k_m.gguf 2>&1)"
  done
}
bench_page() {     # OUTFILE FILE LIMIT_S ARGS...: tests/bench_browser.py in the chosen browser, one tagged line
  local o=$1 m=$2 lim=$3; shift 3
  [ -f /tmp/pg_flags.json ] || { echo "page $m: no GPU adapter chosen, skipped"; return; }
  late "page $m $*" && return
  timeout $(tl $lim) python3 $S page --model /models/$m "$@" > /tmp/pe.json; echo "page $m [$*] rc=$?"
  python3 $S tag page $m "$*" < /tmp/pe.json >> $OUT/$o; tail -n1 $OUT/$o | cut -c1-700
}
bench_native() {   # OUTFILE FILE LIMIT_S ARGS...: python -m cera_web bench on the same file, one tagged line
  local o=$1 m=$2 lim=$3; shift 3
  late "native $m $*" && return
  timeout $(tl $lim) python3 -m cera_web bench --model .assets/models/$m "$@" > /tmp/pe.json; echo "native $m [$*] rc=$?"
  python3 $S tag native $m "$*" < /tmp/pe.json >> $OUT/$o; tail -n1 $OUT/$o | cut -c1-700
}
set +x
for step in $STEPS; do
  [ $(( $(date +%s) - T0 )) -gt $UNTIL ] && { t "$step skipped (past PG_UNTIL=$UNTIL s)"; continue; }
  t "$step"
  case $step in
    probe) PG_PROBE=${PG_PROBE:-one} timeout 260 python3 $S probe $OUT; P=$?; echo "probe rc=$P" ;;
    page|page512)
      [ -f /tmp/pg_flags.json ] || { echo "$step: no GPU adapter chosen, skipped"; continue; }
      a="--model /models/$FIRST"; [ $step = page512 ] && a="$a --prompt-tokens 512 --decode-tokens 128"
      timeout 200 python3 $S page $a >> $OUT/page.jsonl; echo "page [$a] rc=$?"; tail -c 700 $OUT/page.jsonl; echo ;;
    native)
      for a in "--prompt-tokens 512 --decode-tokens 128" "--prompt-tokens 128 --decode-tokens 128"; do
        timeout 120 python3 -m cera_web bench --model $M $a --repeats 3 >> $OUT/native.jsonl; echo "native [$a] rc=$?"
      done ;;
    wllama)       # every PG_MODELS file (and the synthetic ones made this start): 512/128 and decode after 3,584,
      # with the probe's f16 flag set where it gave shader-f16 (llama.cpp's WebGPU needs it), else the chosen set
      [ -f /tmp/pg_flags.json ] || { echo "wllama: no GPU adapter chosen, skipped"; continue; }
      mkdir -p /opt/pgx/wl && tar -xzf $R/.pgb/wllama-*.tgz -C /opt/pgx/wl
      F=/tmp/pg_flags.json; [ -f /tmp/pg_flags_f16.json ] && F=/tmp/pg_flags_f16.json; echo "wllama flags: $(cat $F)"
      for m in ${PG_WLLAMA-$MODELS $SFILES}; do      # PG_WLLAMA: other files of .assets/models
        for a in "--prompt 512 --decode 128 --decode-after 16" "--prompt 512 --decode 128 --decode-after 3584"; do
          late "wllama $m $a" && continue
          PG_FLAGS_FILE=$F timeout $(tl 150) python3 $S wllama .assets/models/$m /opt/pgx/wl/package $a --repeats 2 \
            > /tmp/pe.json; echo "wllama $m [$a] rc=$?"
          python3 $S tag wllama $m "$a" < /tmp/pe.json >> $OUT/wllama.jsonl; tail -n1 $OUT/wllama.jsonl | cut -c1-700
        done
      done ;;
    estimate)     # the real files and the synthetic shapes (made by bench.synthetic_path, served to the page too)
      files=$MODELS
      case ${PG_ESTIMATE:-all} in synth) make_synth; files=$SFILES ;; all) make_synth; files="$SFILES $MODELS" ;; esac
      for m in $files; do      # the synthetic ones first: past PG_UNTIL the last real file goes
        t "estimate $m"
        bench_page estimate.jsonl $m 150 --prompt-tokens 128 --decode-tokens 64 --repeats 3
        bench_native estimate.jsonl $m 120 --prompt-tokens 128 --decode-tokens 64 --repeats 3
      done
      python3 $S predicted $OUT/estimate.jsonl > $OUT/predicted.json; cat $OUT/predicted.json ;;
    p512)         # prefill of 512 tokens and decode after 16, page and native, best of 3 each
      for m in $MODELS; do
        bench_page p512.jsonl $m 150 --prompt-tokens 512 --decode-tokens 128 --repeats 3
        bench_native p512.jsonl $m 120 --prompt-tokens 512 --decode-tokens 128 --repeats 3
      done ;;
    long)         # decode after 3,584 tokens, page and native
      for m in $MODELS; do
        bench_page long.jsonl $m 150 $LONG
        bench_native long.jsonl $m 120 $LONG --repeats 2
      done ;;
    chat)         # the real page: download, OPFS and chat; native: chat TTFT and load from the file
      for m in $MODELS; do
        bench_page app.jsonl $m 150 --app --backend webgpu
        bench_native chat.jsonl $m 120 --chat --prompt-tokens 16 --decode-tokens 8 --repeats 2
      done ;;
    sgmat)        # session 18: the prefill products on subgroup matrices (tensor cores, matmul_sgmat) against the
      # int8 path (CERA_WEB_SGMAT=0) in the page, same call; first gemm_check on the page's device (kernels vs numpy).
      # Both with the probe's f16 flag set: the kernel needs shader-f16, which Dawn gives on NVIDIA/Vulkan only then
      [ -f /tmp/pg_flags_f16.json ] && export PG_FLAGS_FILE=/tmp/pg_flags_f16.json; echo "sgmat flags: ${PG_FLAGS_FILE:-}"
      make_synth
      # (session 18 ran it while the kernel was the default; it is now off unless CERA_WEB_SGMAT=1)
      bench_page sgmat.jsonl $FIRST 150 --prompt-tokens 64 --decode-tokens 8 --check --env CERA_WEB_SGMAT=1
      for m in $SFILES $FIRST; do
        bench_page sgmat.jsonl $m 150 --prompt-tokens 512 --decode-tokens 32 --repeats 3 --env CERA_WEB_SGMAT=1
        bench_page sgmat.jsonl $m 150 --prompt-tokens 512 --decode-tokens 32 --repeats 3
        for v in ${PG_SGMAT_ENVS:-}; do   # other shapes, switches of a variant joined by ";", e.g.
          e=""; for kv in ${v//;/ }; do e="$e --env $kv"; done   # "CERA_WEB_SGMAT_BLOCK=4,2;CERA_WEB_SGMAT_GRID=4,1"
          bench_page sgmat.jsonl $m 150 --prompt-tokens 512 --decode-tokens 32 --repeats 3 --env CERA_WEB_SGMAT=1 $e
        done
      done
      unset PG_FLAGS_FILE ;;
    spec)         # session 20, issue 31: speculative decoding on the real Qwen2.5-Coder-1.5B, in the page and
      # natively on the same files (joined from the pieces h200_s20.sh stashed in /opt/spec: q15.NN, q05.NN), greedy
      # chat tasks off and on in one run each: prompt lookup, then the 0.5B as the draft model -> spec.jsonl
      Q15=qwen2.5-coder-1.5b-instruct-Q4_K_M.gguf Q05=qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf
      cd .assets/models      # joined in the served folder (serve.py refuses symlinks that lead out of it)
      [ -f $Q15 ] || cat /opt/spec/q15.* > $Q15; [ -f $Q05 ] || [ "${PG_SPEC_DRAFT:-1}" = 0 ] || cat /opt/spec/q05.* > $Q05
      sha256sum $Q15 $Q05 | tee -a $OUT/env.txt; cd /opt/pgsrc
      SPEC="--decode-tokens 256 --repeats 2 --context 2048"
      bench_page spec.jsonl $Q15 200 --lookup $SPEC
      bench_native spec.jsonl $Q15 150 --lookup $SPEC
      [ "${PG_SPEC_DRAFT:-1}" = 1 ] || continue      # PG_SPEC_DRAFT=0: prompt lookup only (no 0.5B pieces)
      bench_page spec.jsonl $Q15 250 --draft /models/$Q05 $SPEC
      bench_native spec.jsonl $Q15 200 --draft .assets/models/$Q05 $SPEC ;;
    synth)        # the synthetic 1B / 1.5B in the page and natively: 512 and 128 prompts, long, OPFS loads
      make_synth
      for m in $SFILES; do
        t "synth $m"
        bench_page synth.jsonl $m 150 --prompt-tokens 512 --decode-tokens 128 --repeats 3
        bench_native synth.jsonl $m 120 --prompt-tokens 512 --decode-tokens 128 --repeats 3
        bench_page synth.jsonl $m 150 $LONG
        bench_native synth.jsonl $m 120 $LONG --repeats 2
        bench_page app.jsonl $m 200 --app --backend webgpu
      done ;;
  esac
done
t end
cut -c1-400 $OUT/page.jsonl $OUT/native.jsonl $OUT/long.jsonl $OUT/app.jsonl $OUT/chat.jsonl $OUT/synth.jsonl \
  $OUT/sgmat.jsonl $OUT/spec.jsonl 2>/dev/null
s=$(stat -c %s $OUT/chromium.log 2>/dev/null || echo 0)
[ "$s" -gt 8000000 ] && { tail -c 8000000 $OUT/chromium.log > /tmp/cl && mv /tmp/cl $OUT/chromium.log; }
exit 0
