// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"github.com/tidecache/tidecache/tests/vm/harness"
	"strings"
	"testing"
	"time"
)

// TestPoolOnPartitions builds a pool where administrators often put one:
// the SSD member on a GPT partition (1 MiB aligned) and the origin on a
// partition of an md RAID10, with other partitions beside them. A blank
// partition must count as empty (blkid -p only describes the partition),
// and the member's superblock, which the whole disk also shows 1 MiB in
// (its slot B position), must be found once, on the partition, by create,
// by every later command, and by assembly after a power cut.
func TestPoolOnPartitions(t *testing.T) {
	besideAnother(t, 20*time.Second)
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	spec := nodeSpec{HDDs: 4, HDDSize: 256 << 20, SSDs: []int64{256 << 20}, MemoryMB: 1024}
	dir := harness.TestDir(t)
	n := bootNodeIn(t, dir, bin, spec)
	ssd := n.ssds()[0]
	n.mustSh("mdadm --create /dev/md0 --run --metadata=1.2 --level=10 --raid-devices=4 --chunk=512K --layout=n2 --assume-clean " + strings.Join(n.hdds(), " "))
	n.mustSh("printf 'label: gpt\\n,128MiB\\n,\\n' | sfdisk --quiet /dev/md0")
	n.mustSh("printf 'label: gpt\\n,96MiB\\n,\\n' | sfdisk --quiet " + ssd)
	n.mustSh("for p in /dev/md0p1 /dev/md0p2 " + ssd + "1 " + ssd + "2; do until test -b $p; do sleep 0.1; done; done")

	n.mustTidectl("pool create tank --ssd " + ssd + "1 --origin /dev/md0p1")
	n.mustTidectl("volume create db --size 64M --write-cache 32M")
	if out := n.mustTidectl("pool show tank"); !strings.Contains(out, ssd+"1") || strings.Contains(out, ssd+" ") {
		t.Fatalf("pool show should list the partition %s1 as the member, not the disk:\n%s", ssd, out)
	}
	job := fioJob("/dev/mapper/tc-db", "db", "randwrite", "0", "16M")
	n.fio(job + " --do_verify=1 --fsync_on_close=1")
	if d := n.volume("db").WriteCache.DirtyBlocks; d == 0 {
		t.Fatal("no dirty blocks before the power cut; the test would prove nothing")
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}

	n = bootNodeIn(t, dir, bin, spec)
	n.mustSh("mdadm --assemble --scan --config=partitions") // as udev would at boot
	out := n.mustSh("tidecached assemble")
	if !strings.Contains(out, "/dev/mapper/tc-db") {
		t.Fatalf("assemble did not bring back the volume on partitions:\n%s", out)
	}
	n.fio(job + " --verify_only")
	if d := n.volume("db").WriteCache.DirtyBlocks; d == 0 {
		t.Error("dirty blocks vanished over the power cut")
	}
}
