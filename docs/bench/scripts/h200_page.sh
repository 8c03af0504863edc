#!/bin/bash
# The page on the H200 (issue 26): headless Chromium (Debian's, carried) with WebGPU on the NVIDIA GPU, running
# web/bench.html through tests/bench_browser.py, side by side with the native engine (wgpu-py) and wllama (llama.cpp's
# WebGPU backend, a measuring tool only), in one machine start.
#
# Here, once: sh docs/bench/scripts/pack_chromium.sh   (writes .pg/pg.tar.xz.00..04, .gl, .whl, .pgb; git-ignored;
# .pgb/src.tar.xz is `git archive HEAD`: the code measured, whatever else the checkout's working tree holds)
# Then one device call per piece, each made right after the last (the machine stays warm 30 s; what is copied to
# /opt stays while it is held), in the repository root:
#   call 1..4: carry [".pg/pg.tar.xz.0K"]                          command: bash docs/bench/scripts/h200_page.sh stash
#   call 5:    carry [".pg/pg.tar.xz.04", ".gl", ".whl", ".pgb"]    command: bash docs/bench/scripts/h200_page.sh run 5
# (a call carries the repository, about 8 MB, plus one 52 MiB piece: under the 64 MiB a call.)
# If Chromium gives only SwiftShader's adapter (as on the H200 in session 12), the Dawn-for-Node stand-in:
#   sh docs/bench/scripts/pack_node.sh here; calls 1..2 carry .pg/pgn.tar.xz.00, .01 (stash);
#   call 3: carry [".pg/pgn.tar.xz.02", ".gl", ".whl", ".pgb"], command: bash docs/bench/scripts/h200_page.sh node 3
#   (writes node.jsonl: node_page.mjs, Pyodide under Node on Dawn's Vulkan backend, and native.jsonl).
# `run N` joins the N pieces, unpacks them to /opt/pgx, and writes to $OUT: env.txt, probe.json (adapter per flag
# set, chrome://gpu's text), page.jsonl, native.jsonl, wllama.jsonl, chromium.log and log.txt.
set -u
OUT=${OUT:-/tmp/pg_out}
mkdir -p $OUT /opt/pgparts
cp -n .pg/*.tar.xz.* /opt/pgparts/ 2>/dev/null
echo "pieces on the machine: $(ls /opt/pgparts | tr '\n' ' ')"
if [ "${1:-}" = stash ]; then
  { date -u; uname -a; cat /etc/os-release | head -3; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    ls /usr/local/nvidia/share/vulkan/icd.d /usr/local/nvidia/lib64 2>&1 | head -40; ldconfig -p | grep -c .
    ldconfig -p | grep -E 'libvulkan|libEGL|libnss3|libglib-2|libX11.so|libgbm|libasound|libfontconfig|libstdc'
    which node chromium 2>&1; df -h /opt /tmp | tail -2; } > $OUT/env.txt 2>&1
  exit 0
fi
if [ "${1:-}" = node ]; then     # the Dawn-for-Node stand-in (pack_node.sh): pieces .pg/pgn.tar.xz.NN
  N=${2:-3}
  test $(ls /opt/pgparts/pgn.* | wc -l) -ge $N || { echo "missing pieces: have $(ls /opt/pgparts/pgn.* | wc -l) of $N"; exit 1; }
  exec > >(tee $OUT/log.txt) 2>&1
  set -x
  R=$PWD
  mkdir -p /opt/pgn && cat /opt/pgparts/pgn.tar.xz.* | xz -dc -T0 | tar -x -C /opt/pgn || exit 1
  rm -rf /opt/pgsrc && mkdir -p /opt/pgsrc && xz -dc .pgb/src.tar.xz | tar -x -C /opt/pgsrc && cd /opt/pgsrc || exit 1
  echo "code: $(cat /opt/pgsrc/COMMIT)" | tee -a $OUT/env.txt
  cp -a /opt/pgn/.assets . || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $R/.whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD XDG_RUNTIME_DIR=/tmp PYTHONUNBUFFERED=1
  for f in $R/.gl/*.deb; do dpkg -x $f /; done; ldconfig
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  export VK_ICD_FILENAMES=$VK_DRIVER_FILES
  ldconfig -p | grep -q 'libatomic.so.1 ' || export LD_LIBRARY_PATH=/opt/pgn/pgn/lib
  NODE=/opt/pgn/pgn/node; W=/opt/pgn/pgn/webgpu; M=$PWD/.assets/models/SmolLM2-135M-Instruct.Q4_1.gguf
  $NODE --version
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  for a in "128 128" "512 128" "512 128"; do
    timeout 150 $NODE docs/bench/scripts/node_page.mjs . $W $M $a backend=vulkan >> $OUT/node.jsonl; echo "node [$a] rc=$?"
  done
  for a in "--prompt-tokens 512 --decode-tokens 128" "--prompt-tokens 128 --decode-tokens 128"; do
    timeout 120 python3 -m cera_web bench --model $M $a --repeats 3 >> $OUT/native.jsonl; echo "native [$a] rc=$?"
  done
  cut -c1-700 $OUT/node.jsonl $OUT/native.jsonl
  exit 0
fi
test "${1:-}" = run || { echo "usage: h200_page.sh stash | run N | node N"; exit 2; }
N=${2:-5}
test $(ls /opt/pgparts/pg.* | wc -l) -ge $N || { echo "missing pieces: have $(ls /opt/pgparts/pg.* | wc -l) of $N"; exit 1; }
exec > >(tee $OUT/log.txt) 2>&1
T0=$(date +%s)
t() { echo "== t=$(( $(date +%s) - T0 ))s $*"; }
set -x
mkdir -p /opt/pgx && cat /opt/pgparts/pg.tar.xz.* | xz -dc -T0 | tar -x -C /opt/pgx || exit 1
# The code measured: the commit packed in .pgb/src.tar.xz (git archive HEAD), not whatever this checkout's working
# tree holds (another developer's edits in progress travel with it too).
R=$PWD
if [ -f .pgb/src.tar.xz ]; then
  rm -rf /opt/pgsrc && mkdir -p /opt/pgsrc && xz -dc .pgb/src.tar.xz | tar -x -C /opt/pgsrc && cd /opt/pgsrc || exit 1
  echo "code: $(cat /opt/pgsrc/COMMIT)" | tee -a $OUT/env.txt
fi
cp -a /opt/pgx/.assets . || exit 1
t unpacked
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $R/.whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:/opt/pgx/pg/site:$PWD
for f in $R/.gl/*.deb; do dpkg -x $f /; done; ldconfig
export XDG_RUNTIME_DIR=/tmp PYTHONUNBUFFERED=1 VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export VK_ICD_FILENAMES=$VK_DRIVER_FILES __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
# Chromium's libraries: link the bundled copy of each one the machine lacks (NSS and NSPR as one group).
mkdir -p /opt/pgx/need
have() { ldconfig -p | grep -q "^[[:space:]]*$1 "; }
for f in /opt/pgx/pg/lib/*; do
  n=$(basename $f)
  case $n in
    libnss*|libsmime3*|libsoftokn3*|libfreebl*|libnspr4*|libplc4*|libplds4*) have libnss3.so || ln -sf $f /opt/pgx/need/ ;;
    *) have $n || ln -sf $f /opt/pgx/need/ ;;
  esac
done
echo "bundled libraries used: $(ls /opt/pgx/need | tr '\n' ' ')" | tee -a $OUT/env.txt
export PG_CHROME_LOG=$OUT/chromium.log
cat > /opt/pgx/chromium <<'EOF'
#!/bin/bash
export LD_LIBRARY_PATH=/opt/pgx/need${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} FONTCONFIG_FILE=/opt/pgx/pg/fonts/fonts.conf
echo "=== $(date -u +%T) chromium $*" >> ${PG_CHROME_LOG:-/tmp/chromium.log}
exec /opt/pgx/pg/chromium/chromium "$@" 2>> ${PG_CHROME_LOG:-/tmp/chromium.log}
EOF
chmod +x /opt/pgx/chromium
LD_LIBRARY_PATH=/opt/pgx/need ldd /opt/pgx/pg/chromium/chromium | grep 'not found'
LD_LIBRARY_PATH=/opt/pgx/need FONTCONFIG_FILE=/opt/pgx/pg/fonts/fonts.conf /opt/pgx/pg/chromium/chromium --version
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "from cera_web.gpu.native import NativeDevice as D; d=D.create(); print(d.name, 'subgroup', d.subgroup_size, sorted(d.features))"
S=docs/bench/scripts/h200_page.py
t probe
timeout 300 python3 $S probe $OUT; P=$?; echo "probe rc=$P"
t page
RUNS=("" "--prompt-tokens 512 --decode-tokens 128" "--prompt-tokens 512 --decode-tokens 128")
[ $P = 0 ] || RUNS=("--prompt-tokens 16 --decode-tokens 16")     # no GPU adapter: one short run on the fallback
for a in "${RUNS[@]}"; do
  timeout 240 python3 $S page $a >> $OUT/page.jsonl; echo "page [$a] rc=$?"; tail -c 600 $OUT/page.jsonl; echo
  t "page [$a] done"
done
for a in "--prompt-tokens 512 --decode-tokens 128" "--prompt-tokens 128 --decode-tokens 128"; do
  timeout 120 python3 -m cera_web bench $a --repeats 3 >> $OUT/native.jsonl; echo "native [$a] rc=$?"
  t "native [$a] done"
done
if [ $P = 0 ] && ls $R/.pgb/wllama-*.tgz >/dev/null 2>&1; then
  mkdir -p /opt/pgx/wl && tar -xzf $R/.pgb/wllama-*.tgz -C /opt/pgx/wl
  M=$PWD/.assets/models/SmolLM2-135M-Instruct.Q4_1.gguf
  timeout 240 python3 $S wllama $M /opt/pgx/wl/package --prompt 512 --decode 128 --repeats 3 >> $OUT/wllama.jsonl
  echo "wllama rc=$?"; t "wllama done"
fi
cat $OUT/page.jsonl $OUT/native.jsonl $OUT/wllama.jsonl 2>/dev/null | cut -c1-400
s=$(stat -c %s $OUT/chromium.log 2>/dev/null || echo 0)
[ "$s" -gt 8000000 ] && { tail -c 8000000 $OUT/chromium.log > /tmp/cl && mv /tmp/cl $OUT/chromium.log; }
t end
