#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# build-writecache-ko.sh OUTDIR [PATCH]
#
# Builds dm-writecache.ko for the VM's kernel (Debian's linux-image-amd64)
# from Debian's own kernel source with a proposed change applied (default:
# docs/upstream/0002-dm-writecache-pause-writeback-while-reads-go-to-the-origin.patch),
# so that `go run ./tests/bench -pressure -writecache-ko OUTDIR/dm-writecache.ko`
# measures the change on the same model as the kernel's own target.
# Needs linux-source-6.1 (the kernel's source, about 130 MB) and the
# headers the VM tests use (make deps).
set -eu
out=${1:?usage: build-writecache-ko.sh OUTDIR [PATCH]}
root=$(cd "$(dirname "$0")/../../.." && pwd)
patch=${2:-$root/docs/upstream/0002-dm-writecache-pause-writeback-while-reads-go-to-the-origin.patch}
kver=$(ls /lib/modules | grep -- '-amd64$' | sort -V | tail -1)
tarball=${LINUX_SOURCE_TARBALL:-/usr/src/linux-source-6.1.tar.xz}
if [ ! -f "$tarball" ]; then
	echo "build-writecache-ko: no $tarball: apt-get install linux-source-6.1 (or set LINUX_SOURCE_TARBALL)" >&2
	exit 1
fi
if [ ! -f "/lib/modules/$kver/build/Module.symvers" ]; then
	echo "build-writecache-ko: no headers for $kver: make deps (linux-headers-amd64)" >&2
	exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "build-writecache-ko: extracting dm-writecache from $tarball…"
tar -xJf "$tarball" -C "$work" linux-source-6.1/drivers/md/dm-writecache.c linux-source-6.1/drivers/md/dm-io-tracker.h
src=$work/linux-source-6.1
(cd "$src" && patch -p1 --quiet < "$patch")
mkdir -p "$out"
cp "$src/drivers/md/dm-writecache.c" "$src/drivers/md/dm-io-tracker.h" "$out/"
echo 'obj-m := dm-writecache.o' > "$out/Kbuild"
make -s -C "/lib/modules/$kver/build" M="$(cd "$out" && pwd)" modules
echo "build-writecache-ko: $out/dm-writecache.ko for $kver, with $(basename "$patch")"
