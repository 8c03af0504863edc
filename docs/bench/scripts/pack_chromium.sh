#!/bin/sh
# Pack what docs/bench/scripts/h200_page.sh needs on the H200 (issue 26), from a clean checkout, on a Debian 12 amd64
# machine that has chromium's libraries installed (python3 tests/run.py installs chromium) and the assets fetched
# (python3 serve.py --no-fetch is not enough: run `python3 -m cera_web.assets` once). Run it in the repository root:
#
#   sh docs/bench/scripts/pack_chromium.sh [PIECE_MIB]      # default 52
#   sh docs/bench/scripts/pack_chromium.sh src              # only .pgb/src.tar.xz, from HEAD (the code changed)
#   PG_MODELS="gemma-3-270m-Q4_K_M.gguf" PG_NO_WLLAMA=1 sh docs/bench/scripts/pack_chromium.sh 53    # session 15
#
# Writes (all git-ignored through .git/info/exclude):
#   .gl/   the Vulkan/GL loader debs of the device README (unpacked over / there)
#   .whl/  wheels for the device's python3 3.12: wgpu (+ cffi, pycparser, rendercanvas), gguf, greenlet
#   .pg/   pg.tar.xz.00, .01, ...: one xz tarball, split into pieces small enough for one call each. It holds
#            pg/chromium/   Debian's chromium and chromium-common (/usr/lib/chromium, en-US locale only, without the
#                           Vulkan validation layer and mock ICD)
#            pg/lib/        every non-glibc library that ldd names for chromium (plus NSS's dlopen'ed modules and
#                           libpci), copied from this machine; h200_page.sh links only those the device lacks
#            pg/fonts/      DejaVu Sans and a fonts.conf naming it
#            pg/site/       the playwright wheel, unzipped (its node driver compresses far better in xz)
#            .assets/       pyodide, pyscript, the stamps and the default model (SmolLM2-135M Q4_1)
#   .pgb/  wllama (npm pack @wllama/wllama), a measuring tool only, and src.tar.xz (git archive HEAD: the code
#          measured); both small, they travel with the last call
set -e
PIECE=${1:-52}
ROOT=$PWD
test -f cera_web/__init__.py || { echo "run in the repository root"; exit 1; }
S=/tmp/pg_stage
pack_src() {   # the code to measure: HEAD, not the working tree (uncommitted edits would travel with the checkout)
  rm -rf $S/src && mkdir -p $S/src .pgb && git archive HEAD cera_web shaders web tests serve.py assets.json \
    pyproject.toml docs/bench/scripts | tar -x -C $S/src && git rev-parse HEAD > $S/src/COMMIT
  (cd $S/src && tar -cf - .) | xz -6 -T1 > .pgb/src.tar.xz
}
if [ "$PIECE" = src ]; then    # `pack_chromium.sh src`: .pgb/src.tar.xz alone, from HEAD (the rest of a pack kept)
  pack_src; ls -la .pgb; cat $S/src/COMMIT; exit 0
fi
EXC=.git/info/exclude
mkdir -p .git/info
for d in /.gl/ /.whl/ /.pg/ /.pgb/; do grep -qx "$d" $EXC 2>/dev/null || echo "$d" >> $EXC; done
rm -rf $S .pg .pgb; mkdir -p $S/deb $S/pg/pg/chromium $S/pg/pg/lib $S/pg/pg/fonts $S/pg/pg/site .pg .pgb .gl .whl

# Debian package lists of our own, so apt-get download works whatever this machine's sources say.
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
mkdir -p /tmp/amd64/partial
apt-get $o update -qq
(cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
(cd $S/deb && apt-get $o download chromium chromium-common libpci3)
for f in $S/deb/*.deb; do dpkg -x $f $S/root; done
cp -a $S/root/usr/lib/chromium/. $S/pg/pg/chromium/
rm -f $S/pg/pg/chromium/libVkLayer_khronos_validation.so* $S/pg/pg/chromium/libVkICD_mock_icd.so*
find $S/pg/pg/chromium/locales -type f ! -name 'en-US*' -delete

# Libraries: what ldd resolves here for chromium and the NSS modules it dlopens, glibc's own excepted.
L=/usr/lib/x86_64-linux-gnu
cp -L $S/root/usr/lib/x86_64-linux-gnu/libpci.so.3 $S/pg/pg/lib/
NSS=""
for n in libsoftokn3.so libfreebl3.so libfreeblpriv3.so libnssckbi.so libnssdbm3.so; do
  test -f $L/$n && { cp -L $L/$n $S/pg/pg/lib/; NSS="$NSS $L/$n"; }
done
ldd $S/pg/pg/chromium/chromium $NSS | grep -q 'not found' && { ldd $S/pg/pg/chromium/chromium | grep 'not found';
  echo "install chromium's libraries first (apt-get install chromium)"; exit 1; }
ldd $S/pg/pg/chromium/chromium $NSS | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read lib; do
  case $(basename $lib) in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|ld-linux*) ;;
    *) cp -L $lib $S/pg/pg/lib/ ;;
  esac
done
cp -L /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf $S/pg/pg/fonts/
cat > $S/pg/pg/fonts/fonts.conf <<'EOF'
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig><dir>/opt/pgx/pg/fonts</dir><cachedir>/tmp/fontconfig</cachedir></fontconfig>
EOF

# Wheels for the device's python3 3.12 (pinned to what .venv has here), and playwright unzipped into the tarball.
P="--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
for s in wgpu==0.32.0 cffi==2.1.1 pycparser==3.12 rendercanvas==2.7.2 gguf==0.19.0 greenlet==3.5.6 playwright==1.65.2; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $P -d .whl $s
done
(cd $S/pg/pg/site && python3 -m zipfile -e $ROOT/.whl/playwright-*.whl . && chmod +x playwright/driver/node)
mv .whl/playwright-*.whl $S/

# Assets: the default ones (what ensure_assets() checks) and the default model.
mkdir -p $S/pg/.assets/models
cp -a .assets/pyodide .assets/pyscript .assets/stamps $S/pg/.assets/
# PG_MODELS: other files of .assets/models to carry instead (session 15: gemma-3-270m-Q4_K_M.gguf alone).
for m in ${PG_MODELS:-SmolLM2-135M-Instruct.Q4_1.gguf}; do cp -a .assets/models/$m $S/pg/.assets/models/; done

(cd $S/pg && tar -cf - pg .assets) | nice xz -6 -T1 | split -b ${PIECE}M -d - .pg/pg.tar.xz.
[ -n "${PG_NO_WLLAMA:-}" ] || (cd .pgb && npm pack -q @wllama/wllama@3.13.0 >/dev/null)    # PG_NO_WLLAMA=1: none
pack_src
ls -la .pg .pgb .gl .whl
