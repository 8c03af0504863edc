#!/bin/sh
# Pack the Dawn-for-Node stand-in of h200_page.sh (`node` mode): Pyodide under Node on Dawn (`npm pack webgpu`),
# for where headless Chromium cannot reach the GPU (issue 26). Run in the repository root after pack_chromium.sh
# (it reuses .whl, .gl and .pgb/src.tar.xz from there, and Playwright's node binary from its wheel):
#
#   sh docs/bench/scripts/pack_node.sh [PIECE_MIB]     # default 52: writes .pg/pgn.tar.xz.00, .01, ...
#
# The tarball holds pgn/node (the node binary of the playwright wheel), pgn/lib/libatomic.so.1 (that node's one
# library beyond glibc and libstdc++), pgn/webgpu (the npm package, its linux-x64 build only), and .assets (pyodide,
# the stamps and the default model).
set -e
PIECE=${1:-52}
ROOT=$PWD
test -f cera_web/__init__.py || { echo "run in the repository root"; exit 1; }
S=/tmp/pgn_stage
rm -rf $S .pg/pgn.tar.xz.*; mkdir -p $S/pgn/pgn/lib $S/pgn/.assets/models $S/npm .pg
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux1_x86_64 -d $S playwright==1.65.2
python3 -m zipfile -e $S/playwright-*.whl $S/pw
cp $S/pw/playwright/driver/node $S/pgn/pgn/node && chmod +x $S/pgn/pgn/node
cp -L /usr/lib/x86_64-linux-gnu/libatomic.so.1 $S/pgn/pgn/lib/
(cd $S/npm && npm pack -q webgpu@0.6.2 >/dev/null && tar -xzf webgpu-0.6.2.tgz)
mkdir -p $S/pgn/pgn/webgpu/dist
cp $S/npm/package/index.js $S/npm/package/package.json $S/npm/package/LICENSE.md $S/pgn/pgn/webgpu/
cp -a $S/npm/package/dist/linux-x64 $S/pgn/pgn/webgpu/dist/
cp -a .assets/pyodide .assets/stamps $S/pgn/.assets/
cp -a .assets/models/SmolLM2-135M-Instruct.Q4_1.gguf $S/pgn/.assets/models/
(cd $S/pgn && tar -cf - pgn .assets) | nice xz -6 -T1 | split -b ${PIECE}M -d - .pg/pgn.tar.xz.
ls -la .pg
