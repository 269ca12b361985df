// SPDX-License-Identifier: Apache-2.0

// Package testbed is the emulated machine that `make demo` (tests/demo) and
// `make bench` (tests/bench) measure: one qemu VM (tests/vm) with four
// "HDDs" and one or two "SSDs", tidectl and tidecached built for it, fio to
// drive it and the parsers for what fio and tidectl report.
//
// The HDDs are raw images behind two throttles, because neither alone
// behaves like a spindle, and a bounded queue (docs/benchmarks.md, "HDD
// model"; DESIGN §5):
//
//   - inside the guest, dm-delay adds a fixed service time to every read,
//     write and flush (/dev/mapper/hdd0..3 over /dev/vda..vdd), which gives
//     a queue-depth-1 latency like a seek plus half a rotation;
//   - on the host, qemu's per-drive throttling (harness.Disk.IOPSLimit) caps each
//     disk's IOPS, which dm-delay does not do: it delays every I/O
//     independently, so at queue depth 16 one delayed disk would serve
//     hundreds of IOPS;
//   - each disk is its own virtio-blk device with one request queue of
//     HDD.QueueDepth entries (harness.Disk.Queues and QueueSize; 32, a SATA
//     drive's NCQ), so the guest keeps at most that many commands in flight
//     on it, and the guest runs HDD.Scheduler on it (mq-deadline, as for
//     SATA disks under md; or none, as behind a hardware RAID controller).
//     With qemu's defaults (one queue per vCPU of 256 entries) the guest ran
//     no scheduler and kept up to 512 commands in flight per disk.
//
// What the model gets wrong: dm-delay is bio-based and sits above the disk's
// queue. It keeps every bio it is given on a list, without bound, and one
// worker per disk submits the expired ones in arrival order; when the disk's
// tags (and mq-deadline's requests, twice the tags) are taken, that worker
// blocks and every bio behind it waits on dm-delay's list. On a real disk
// each submitter blocks on tags for itself and mq-deadline keeps part of its
// requests for synchronous I/O, so a read gets ahead of a flood of
// asynchronous writes; in the model it waits behind every write submitted
// before it, and the scheduler chooses only among the requests that got past
// the delay line. Waits behind a write flood are therefore longer than on
// real disks, on both schedulers, and the model shows less difference
// between mq-deadline and none than real disks would. The QD1 latency and
// the IOPS cap are what they were: on one delayed disk, 4k random reads ran
// at 68 IOPS at QD1 (mean 14.6 ms) and 146 at QD32 with the old queues, 72
// (13.7 ms) and 152 with one queue of 32 under mq-deadline (dm-delay counts
// its 8 ms in the guest kernel's 4 ms timer ticks, and emulation adds the
// rest). Measured once (2026-11-28, one delayed disk, 4k random writes at
// QD1024 with a QD1 reader beside them, 30 s, host shared with other VMs):
// the reader waited 5.6 s on average with the old queues (2 × 256, no
// scheduler) and 5.3 s with one queue of 32 and no scheduler: the flood sits
// above the queue.
//
// The SSD images are plain raw files without a cap, written full of zeros
// on the host before boot so that no measured write lands in a hole of the
// host file (which costs the host filesystem an allocation and a journal
// commit on the next flush, and would favour whichever device happened to
// touch its blocks first).
//
// Which disks have a volatile write cache is set in the guest (sysfs
// queue/write_cache) before any device-mapper device is made, because it
// decides where flushes go: by default the HDDs are write-through (write
// cache off, as database servers run them) and the SSDs too (data-centre
// NVMe with power-loss protection), so the kernel sends neither any flush;
// HDD.WriteCache and Config.SSDWriteCache model the other kind.
//
// A Bed owns its VM and its directory under harness.CacheDir(): Start makes
// fresh images every time (a pool left by an earlier run would make
// `tidectl pool create` refuse), Close shuts the VM down and removes the
// images unless Config.Keep is set. Every blocking call takes a context;
// errors carry the command and its output.
//
// Numbers from a Bed come from a software-emulated (TCG) VM on a shared
// host: compare them only with numbers from the same run.
package testbed
