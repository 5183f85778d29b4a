#!/usr/bin/env bash
# An emulated ARM userland with Python and numpy from Debian's packages, for `make test-arm`:
#
#     tests_arm/rootfs.sh armhf|arm64      -> prints the root file system's path
#
# debootstrap's first stage only (--foreign: download, unpack the required packages), then the others (python3,
# numpy ...) unpacked with dpkg-deb: no maintainer script runs, so no binfmt handler is needed (a container may
# not register one); the links that dpkg's alternatives would make for numpy's BLAS and LAPACK are made here. Programs run as `qemu-arm-static -L ROOT ROOT/usr/bin/python3`.
# Cached under ${VDLA_ARM_CACHE:-~/.cache/vdla/arm}, outside the clone, with a stamp naming the suite and
# packages: a second run on the same machine returns at once. No llvmlite and no compiler are installed.
set -euo pipefail
arch=${1:?usage: $0 armhf|arm64}
suite=${VDLA_ARM_SUITE:-trixie} # Python 3.13 and numpy 2.2 (vdla needs numpy >= 1.26; bookworm has 1.24)
mirror=${VDLA_ARM_MIRROR:-http://deb.debian.org/debian}
cache=${VDLA_ARM_CACHE:-$HOME/.cache/vdla/arm}
# vdla[cli] without extras: numpy, rich and cryptography (checking artifact signatures; its cffi backend named:
# debootstrap does not resolve the virtual packages cryptography depends on)
packages=python3,python3-numpy,python3-rich,python3-cryptography,python3-cffi-backend
case $arch in
  armhf) qemu=qemu-arm-static triple=arm-linux-gnueabihf ;;
  arm64) qemu=qemu-aarch64-static triple=aarch64-linux-gnu ;;
  *) echo "error: unknown architecture $arch (armhf or arm64)" >&2; exit 2 ;;
esac
root=$cache/$arch-$suite
stamp="$suite $packages"
if [ -f "$root/.vdla-rootfs" ] && [ "$(cat "$root/.vdla-rootfs")" = "$stamp" ]; then
  echo "$root"
  exit 0
fi
for tool in debootstrap $qemu; do
  command -v $tool >/dev/null || { echo "error: $tool is missing: apt-get install -y qemu-user-static debootstrap" >&2; exit 2; }
done
mkdir -p "$cache"
rm -rf "$root.tmp"
echo "building the $arch root file system ($suite: $packages) in $root" >&2
debootstrap --foreign --arch="$arch" --variant=minbase --include="$packages" "$suite" "$root.tmp" "$mirror" >&2
for pkg in $(cat "$root.tmp/debootstrap/base"); do
  deb=$(awk -v p="$pkg" '$1 == p { print $2 }' "$root.tmp/debootstrap/debpaths")
  dpkg-deb -x "$root.tmp/$deb" "$root.tmp"
done
for lib in blas lapack; do
  ln -sf "$lib/lib$lib.so.3" "$root.tmp/usr/lib/$triple/lib$lib.so.3"
done
rm -rf "$root.tmp/var/cache/apt/archives/"*.deb
$qemu -L "$root.tmp" "$root.tmp/usr/bin/python3" -c "import numpy, rich, cryptography; print('python', __import__('sys').version.split()[0], 'numpy', numpy.__version__)" >&2
rm -rf "$root"
mv "$root.tmp" "$root"
echo "$stamp" >"$root/.vdla-rootfs"
echo "$root"
