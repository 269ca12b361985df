#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# What protecting the write cache costs: a write tier on one SSD slice,
# against the same on a dm-raid raid1 of two SSDs (--protect local), and on
# a raid1 whose second leg comes over NVMe/TCP (the peer leg; here the
# "peer" is this VM's own nvmet over loopback TCP, so it counts the NVMe/TCP
# stack, not a network hop). Runs in a test VM with three scratch disks,
# two SSDs (/dev/vda, /dev/vdb) and an origin (/dev/vdc):
#
#   go run ./tests/vm/harness/vmrun -mem 1024 -disk .cache/exp/ssda.img:512M \
#       -disk .cache/exp/ssdb.img:512M -disk .cache/exp/hdd.img:1G \
#       "sh $PWD/tests/bench/scripts/mirror-cost.sh"
#
# Each stack is what tidecache builds: fuaflush over dm-writecache over an
# origin slice, the cache on a 160 MiB slice (one leg) or on the raid1 of two
# such slices, each leg with its 1 MiB metadata slice. 4k random writes at
# QD1 over 64 MiB, rounds interleaved:
#   *-dsync   O_DSYNC writes: each one durable when acknowledged, so each
#             pays a write and a metadata commit on every leg
#   *-plain   plain writes (QD1)
#   *-qd16    plain writes at QD16: throughput
# and prints IOPS; at QD1 the mean latency is 1/IOPS.
set -e
ROUNDS=${ROUNDS:-3}
modprobe dm-raid
modprobe nvmet-tcp
modprobe nvme-tcp
MB=2048 # sectors per MiB
LEG=$((160 * MB))
ORIGIN=$((256 * MB))

# Origin slices, one per stack.
dmsetup create o1 --table "0 $ORIGIN linear /dev/vdc 0"
dmsetup create o2 --table "0 $ORIGIN linear /dev/vdc $ORIGIN"
dmsetup create o3 --table "0 $ORIGIN linear /dev/vdc $((2 * ORIGIN))"

# one: a single slice of SSD A.
dmsetup create one-c --table "0 $LEG linear /dev/vda 0"
# local: SSD A + SSD B.
dmsetup create loc-m0 --table "0 $MB linear /dev/vda $LEG"
dmsetup create loc-d0 --table "0 $LEG linear /dev/vda $((LEG + MB))"
dmsetup create loc-m1 --table "0 $MB linear /dev/vdb 0"
dmsetup create loc-d1 --table "0 $LEG linear /dev/vdb $MB"
# peer: SSD A + SSD B's second half exported over NVMe/TCP and attached.
dmsetup create peer-m0 --table "0 $MB linear /dev/vda $((2 * LEG + MB))"
dmsetup create peer-d0 --table "0 $LEG linear /dev/vda $((2 * LEG + 2 * MB))"
dmsetup create export --table "0 $((LEG + MB)) linear /dev/vdb $((LEG + MB))"
NQN=nqn.2014-08.io.tidecache:bench:peer
HOST=nqn.2014-08.io.tidecache:bench:host
T=/sys/kernel/config/nvmet
mkdir $T/hosts/$HOST $T/subsystems/$NQN
echo 0 >$T/subsystems/$NQN/attr_allow_any_host
ln -s $T/hosts/$HOST $T/subsystems/$NQN/allowed_hosts/$HOST
mkdir $T/subsystems/$NQN/namespaces/1
echo /dev/mapper/export >$T/subsystems/$NQN/namespaces/1/device_path
echo 1 >$T/subsystems/$NQN/namespaces/1/enable
mkdir $T/ports/4420
echo tcp >$T/ports/4420/addr_trtype
echo ipv4 >$T/ports/4420/addr_adrfam
echo 4420 >$T/ports/4420/addr_trsvcid
echo 127.0.0.1 >$T/ports/4420/addr_traddr
ln -s $T/subsystems/$NQN $T/ports/4420/subsystems/$NQN
echo "transport=tcp,traddr=127.0.0.1,trsvcid=4420,nqn=$NQN,hostnqn=$HOST,keep_alive_tmo=2,reconnect_delay=1,fast_io_fail_tmo=1,ctrl_loss_tmo=10" >/dev/nvme-fabrics
sleep 2
NS=$(ls -d /sys/class/nvme-subsystem/nvme-subsys*/nvme*n1 | head -1)
NS=/dev/$(basename "$NS")
dmsetup create peer-m1 --table "0 $MB linear $NS 0"
dmsetup create peer-d1 --table "0 $LEG linear $NS $MB"

for s in loc peer; do
	dd if=/dev/zero of=/dev/mapper/$s-m0 bs=1M count=1 oflag=direct status=none
	dd if=/dev/zero of=/dev/mapper/$s-m1 bs=1M count=1 oflag=direct status=none
	dmsetup create $s-c --table "0 $LEG raid raid1 1 0 2 /dev/mapper/$s-m0 /dev/mapper/$s-d0 /dev/mapper/$s-m1 /dev/mapper/$s-d1"
done
for s in loc peer; do
	until dmsetup status $s-c | grep -q ' AA .* idle '; do sleep 1; done
done
for s in one loc peer; do
	dd if=/dev/zero of=/dev/mapper/$s-c bs=4k count=1 oflag=direct status=none
done
i=1
for s in one loc peer; do
	dmsetup create $s-wc --table "0 $ORIGIN writecache s /dev/mapper/o$i /dev/mapper/$s-c 4096 0"
	dmsetup create $s --table "0 $ORIGIN fuaflush /dev/mapper/$s-wc"
	i=$((i + 1))
done

job() { # name device fio-options
	fio --name="$1" --filename="$2" --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=1 \
		--size=64M --time_based --runtime=6 --output-format=terse --terse-version=3 $3 |
		awk -F';' -v n="$1" '{ printf "%-12s %8.1f IOPS  %7.2f ms\n", n, $49, 1000 / $49 }'
}
round=1
while [ "$round" -le "$ROUNDS" ]; do
	echo "round $round"
	for s in one loc peer; do
		job $s-dsync /dev/mapper/$s --sync=dsync
	done
	for s in one loc peer; do
		job $s-plain /dev/mapper/$s ""
	done
	for s in one loc peer; do
		job $s-qd16 /dev/mapper/$s --iodepth=16
	done
	round=$((round + 1))
done
for s in loc peer; do echo "$s mirror: $(dmsetup status $s-c)"; done
