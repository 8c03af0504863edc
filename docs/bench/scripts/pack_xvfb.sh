#!/bin/sh
# Pack an X server for the H200 (issue 26, session 13): Debian 12's Xvfb and xkbcomp with every library they link
# (glibc's own excepted) and the XKB data, as one small xz tarball, .xv/xv.tar.xz (git-ignored). On the device
# h200_page_gpu.sh (session 13: h200_s13_page.sh) unpacks it to /opt/xv, links only the libraries the machine lacks, and starts Xvfb, so that
# Chromium can run headed (Ozone X11), where its Vulkan instance asks for VK_KHR_xcb_surface (NVIDIA's driver has it)
# instead of the headless surface extension that failed in session 12. Run it in the repository root:
#
#   sh docs/bench/scripts/pack_xvfb.sh
set -e
test -f cera_web/__init__.py || { echo "run in the repository root"; exit 1; }
EXC=.git/info/exclude
grep -qx /.xv/ $EXC 2>/dev/null || echo /.xv/ >> $EXC
S=/tmp/xv_stage
rm -rf $S .xv; mkdir -p $S/deb $S/root $S/xv/xv/bin $S/xv/xv/lib .xv
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
mkdir -p /tmp/amd64/partial
apt-get $o update -qq
# xvfb's and xkbcomp's dependencies, recursively, as Debian 12 names them (libGL comes from .gl on the device).
(cd $S/deb && apt-get $o download -q xvfb x11-xkb-utils xkb-data libxfont2 libfontenc1 libunwind8 libxkbfile1 \
  libxau6 libxdmcp6 libaudit1 libcap-ng0 libbsd0 libmd0 libgcrypt20 libgpg-error0 libselinux1 libpcre2-8-0 \
  libsystemd0 liblz4-1 libzstd1 liblzma5 libbz2-1.0 libx11-6 libxcb1 libcap2 libpng16-16 libbrotli1 zlib1g \
  libpixman-1-0 libfreetype6 >/dev/null)
for f in $S/deb/*.deb; do dpkg -x $f $S/root; done
cp $S/root/usr/bin/Xvfb $S/root/usr/bin/xkbcomp $S/xv/xv/bin/
L="$S/root/usr/lib/x86_64-linux-gnu:$S/root/lib/x86_64-linux-gnu"
LD_LIBRARY_PATH=$L ldd $S/xv/xv/bin/Xvfb $S/xv/xv/bin/xkbcomp | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
  sort -u | while read name path; do
  case $name in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libGL.so.*|libGLX.so.*|libGLdispatch.so.*) ;;
    *) case $path in $S/*) cp -L $path $S/xv/xv/lib/$name ;; *) echo "not from the debs: $name $path"; exit 1 ;; esac ;;
  esac
done
cp -a $S/root/usr/share/X11/xkb $S/xv/xv/xkb
(cd $S/xv && tar -cf - xv) | xz -6 -T1 > .xv/xv.tar.xz
ls -la .xv; ls $S/xv/xv/lib | tr '\n' ' '; echo
