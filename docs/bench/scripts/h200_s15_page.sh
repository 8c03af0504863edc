#!/bin/bash
# The page in Chromium on the H200 for Gemma 3 270M Q4_K_M (issue 26, session 15): h200_s13_page.sh with the model
# changed, no wllama, the probe cut to the one flag set that gave the NVIDIA adapter in session 13 (all of session
# 13's sets only if that one fails), and the page and native steps repeated in turn until PG_UNTIL seconds.
#
# Here, once, in the repository root (all outputs git-ignored):
#   PG_MODELS="gemma-3-270m-Q4_K_M.gguf" PG_NO_WLLAMA=1 sh docs/bench/scripts/pack_chromium.sh 53
#                                             # .pg/pg.tar.xz.00..NN (the model inside), .gl, .whl, .pgb (src.tar.xz)
#   sh docs/bench/scripts/pack_xvfb.sh        # .xv/xv.tar.xz
# Then one device call per piece, each right after the last (the machine stays warm 30 s; /opt stays while held):
#   calls 1..N-1: carry [".pg/pg.tar.xz.0K"]                      command: bash docs/bench/scripts/h200_s15_page.sh stash
#   call N: carry [".pg/pg.tar.xz.LAST", ".gl", ".whl", ".pgb", ".xv"]  command: bash docs/bench/scripts/h200_s15_page.sh run N
# Writes to $OUT: env.txt, xvfb.log, probe.json, page.jsonl, native.jsonl, chromium.log and log.txt.
# PG_STEPS (default below) picks the steps of `run`, in order (page: 128 prompt and 128 decode tokens; page512: 512
# and 128; native: `python -m cera_web bench` at 512/128 and 128/128, 3 repeats each); a step that would start after
# PG_UNTIL seconds (default 330) is skipped.
set -u
OUT=${OUT:-/tmp/pg_out}
mkdir -p $OUT /opt/pgparts
cp -n .pg/*.tar.xz.* /opt/pgparts/ 2>/dev/null
mkdir -p /opt/pqparts; cp -n .pq/* /opt/pqparts/ 2>/dev/null    # PG_MODEL's raw pieces (.pq/NAME.NN)
echo "pieces on the machine: $(ls /opt/pgparts | tr '\n' ' ')"
if [ "${1:-}" = stash ]; then
  { date -u; uname -a; head -3 /etc/os-release; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    ls /usr/local/nvidia/share/vulkan/icd.d; ldconfig -p | grep -E 'libX11.so|libxcb.so|libXfont2|libxkbfile|libunwind|libpixman'
    which Xvfb xkbcomp 2>&1; ls /usr/share/X11/xkb 2>&1 | head -3; df -h /opt | tail -1; } > $OUT/env.txt 2>&1
  exit 0
fi
test "${1:-}" = run || { echo "usage: h200_s15_page.sh stash | run N"; exit 2; }
N=${2:-5}
STEPS=${PG_STEPS:-probe page page512 native page page512 native page page512 native page page512}
UNTIL=${PG_UNTIL:-330}
test $(ls /opt/pgparts/pg.* | wc -l) -ge $N || { echo "missing pieces: have $(ls /opt/pgparts/pg.* | wc -l) of $N"; exit 1; }
exec > >(tee $OUT/log.txt) 2>&1
T0=$(date +%s)
t() { echo "== t=$(( $(date +%s) - T0 ))s $*"; }
set -x
R=$PWD
if [ ! -f /opt/pgx/.unpacked ]; then
  mkdir -p /opt/pgx && cat /opt/pgparts/pg.tar.xz.* | xz -dc -T0 | tar -x -C /opt/pgx && touch /opt/pgx/.unpacked || exit 1
fi
# The code measured: the commit packed in .pgb/src.tar.xz (git archive HEAD), not this checkout's working tree
# (others' edits in progress travel with it); this session's scripts are copied in from the checkout.
rm -rf /opt/pgsrc && mkdir -p /opt/pgsrc && xz -dc .pgb/src.tar.xz | tar -x -C /opt/pgsrc || exit 1
cp $R/docs/bench/scripts/h200_page.py $R/docs/bench/scripts/h200_s13_page.py \
  $R/docs/bench/scripts/h200_s15_page.py /opt/pgsrc/docs/bench/scripts/
cd /opt/pgsrc && cp -a /opt/pgx/.assets . || exit 1
# PG_MODEL (another file of .assets/models, e.g. qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf): joined from /opt/pqparts
[ -n "${PG_MODEL:-}" ] && [ ! -f .assets/models/$PG_MODEL ] && cat /opt/pqparts/* > .assets/models/$PG_MODEL
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
S=docs/bench/scripts/h200_s15_page.py
M=$PWD/.assets/models/${PG_MODEL:-gemma-3-270m-Q4_K_M.gguf}
echo "model: $(sha256sum $M) (assets.json: a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818)" | tee -a $OUT/env.txt
P=3
set +x
for step in $STEPS; do
  [ $(( $(date +%s) - T0 )) -gt $UNTIL ] && { t "$step skipped (past PG_UNTIL=$UNTIL s)"; continue; }
  t "$step"
  case $step in
    probe) timeout 260 python3 $S probe $OUT; P=$?; echo "probe rc=$P" ;;
    page|page512)
      [ -f /tmp/pg_flags.json ] || { echo "$step: no GPU adapter chosen, skipped"; continue; }
      a="--model /models/${PG_MODEL:-gemma-3-270m-Q4_K_M.gguf}"; [ $step = page512 ] && a="$a --prompt-tokens 512 --decode-tokens 128"
      timeout 200 python3 $S page $a >> $OUT/page.jsonl; echo "page [$a] rc=$?"; tail -c 700 $OUT/page.jsonl; echo ;;
    native)
      for a in "--prompt-tokens 512 --decode-tokens 128" "--prompt-tokens 128 --decode-tokens 128"; do
        timeout 120 python3 -m cera_web bench --model $M $a --repeats 3 >> $OUT/native.jsonl; echo "native [$a] rc=$?"
      done ;;
    wllama)
      [ -f /tmp/pg_flags.json ] || { echo "wllama: no GPU adapter chosen, skipped"; continue; }
      mkdir -p /opt/pgx/wl && tar -xzf $R/.pgb/wllama-*.tgz -C /opt/pgx/wl
      for a in "--prompt 512 --decode 128" "--prompt 128 --decode 128"; do
        timeout 240 python3 $S wllama $M /opt/pgx/wl/package $a --repeats 3 >> $OUT/wllama.jsonl; echo "wllama [$a] rc=$?"
      done ;;
  esac
done
t end
cut -c1-400 $OUT/page.jsonl $OUT/native.jsonl 2>/dev/null
s=$(stat -c %s $OUT/chromium.log 2>/dev/null || echo 0)
[ "$s" -gt 8000000 ] && { tail -c 8000000 $OUT/chromium.log > /tmp/cl && mv /tmp/cl $OUT/chromium.log; }
exit 0
