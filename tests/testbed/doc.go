// Package testbed is the emulated machine that `make demo` (tests/demo) and
// `make bench` (tests/bench) measure: one qemu VM (tests/vm) with four
// "HDDs" and one or two "SSDs", tidectl and tidecached built for it, fio to
// drive it and the parsers for what fio and tidectl report.
//
// The HDDs are raw images behind two throttles, because neither alone
// behaves like a spindle (docs/benchmarks.md, DESIGN §5):
//
//   - inside the guest, dm-delay adds a fixed service time to every read,
//     write and flush (/dev/mapper/hdd0..3 over /dev/vda..vdd), which gives
//     a queue-depth-1 latency like a seek plus half a rotation;
//   - on the host, qemu's per-drive throttling (harness.Disk.IOPSLimit) caps each
//     disk's IOPS, which dm-delay does not do: it delays every I/O
//     independently, so at queue depth 16 one delayed disk would serve
//     hundreds of IOPS.
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
