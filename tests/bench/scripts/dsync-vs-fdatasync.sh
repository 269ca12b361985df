#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# What a durable O_DSYNC write costs on tidecache's write tier, against the
# cheapest durable alternative without fuaflush. Runs in a test VM with two
# scratch disks, an SSD (/dev/vda) and an origin (/dev/vdb):
#
#   go run ./tests/vm/harness/vmrun -disk .cache/exp/ssd.img:512M \
#       -disk .cache/exp/hdd.img:512M "sh $PWD/tests/bench/scripts/dsync-vs-fdatasync.sh"
#
# It builds the write tier by hand (dm-writecache over vdb, cache on vda)
# with fuaflush on top, as tidecache does, and runs 4k random writes at
# QD1 over 64 MiB, rounds interleaved:
#   ff-dsync      O_DSYNC (FUA) writes through fuaflush: durable when acknowledged
#   wc-fdatasync  plain writes to dm-writecache, each followed by fdatasync:
#                 durable, what an application would need without fuaflush
#   wc-dsync      O_DSYNC writes to dm-writecache alone: NOT durable (the
#                 mapping of a write into a new cache block stays in RAM
#                 until the next commit); the old stack, for reference
#   ff-plain, wc-plain  plain writes: the layer's cost on ordinary I/O
# and prints IOPS; at QD1 the mean latency is 1/IOPS.
set -e
ROUNDS=${ROUNDS:-3}
S=$(blockdev --getsz /dev/vdb)
dmsetup create wc --table "0 $S writecache s /dev/vdb /dev/vda 4096 0"
dmsetup create ff --table "0 $S fuaflush /dev/mapper/wc"
job() { # name device fio-options
	fio --name="$1" --filename="$2" --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=1 \
		--size=64M --time_based --runtime=6 --output-format=terse --terse-version=3 $3 |
		awk -F';' -v n="$1" '{ printf "%-14s %8.1f IOPS  %7.2f ms\n", n, $49, 1000 / $49 }'
}
round=1
while [ "$round" -le "$ROUNDS" ]; do
	echo "round $round"
	job ff-dsync /dev/mapper/ff --sync=dsync
	job wc-fdatasync /dev/mapper/wc --fdatasync=1
	job wc-dsync /dev/mapper/wc --sync=dsync
	job ff-plain /dev/mapper/ff ""
	job wc-plain /dev/mapper/wc ""
	round=$((round + 1))
done
echo "fuaflush status (FUA writes, flushes, flush errors): $(dmsetup status ff)"
dmsetup remove ff
dmsetup remove wc
