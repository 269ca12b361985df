// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// syncedFiles writes n files of random data under dir, of size+i*4096
// bytes each, fsyncs each, and appends their checksums to list.
const syncedFiles = `set -e
dir=$1 list=$2 n=$3 tag=$4 size=$5
mkdir -p $dir
for i in $(seq 1 $n); do
	head -c $((size + i * 4096)) /dev/urandom > $dir/$tag-$i
	sync $dir/$tag-$i
done
(cd $dir && sha256sum $tag-*) >> $list
sync`

// backgroundFiles writes files of 128 KiB under dir until /run/bg.stop
// exists, fsyncs each and then appends its checksum to list: every file
// listed was acknowledged. It exits on the first error, leaving its exit
// code in /run/bg.rc.
const backgroundFiles = `dir=$1 list=$2
mkdir -p $dir
i=0
while [ ! -e /run/bg.stop ]; do
	i=$((i + 1))
	head -c 131072 /dev/urandom > $dir/bg-$i && sync $dir/bg-$i && (cd $dir && sha256sum bg-$i) >> $list || { echo $? > /run/bg.rc; exit 1; }
done
echo 0 > /run/bg.rc`

// TestResizeAndUncache grows two mounted volumes, one ext4 and one XFS,
// each followed by another on the HDD array, then uncaches one, and cuts
// the power after both:
//   - resize: refused past the array's free space and for a smaller
//     size; db (ext4, writeback, under a writer that fsyncs a file after
//     file throughout) grows past its neighbour into a second extent,
//     live; resize2fs grows the filesystem online; files written past
//     the old end, and every file the writer had acknowledged, verify;
//   - logs (XFS) grows past db's new extent the same way: xfs_growfs;
//   - uncache, with dirty blocks and the filesystem mounted: the drain's
//     progress, then passthrough without caches, two devices left, the
//     pool's SSD space back, the files intact, writeback refused, a
//     second uncache with nothing to do;
//   - after the power cut, assembly brings both volumes up at their new
//     size from the format 2 superblock, and every file verifies.
func TestResizeAndUncache(t *testing.T) {
	besideAnother(t, 50*time.Second)
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	n := bootNodeIn(t, dir, bin, smallNode)
	n.createPool("tank")
	n.mustTidectl("volume create db --size 64M --write-cache 32M --read-cache 16M --protect none")
	n.mustTidectl("volume create logs --size 64M --write-cache 16M --protect none")
	n.wantFail("volume resize db --size 4G", "not enough free space", "is free")
	n.wantFail("volume resize db --size 32M", "tidecache only grows volumes")

	n.mustSh("mkfs.ext4 -q -F " + mkfsOpts + " /dev/mapper/tc-db && mkdir -p /mnt/db && mount /dev/mapper/tc-db /mnt/db")
	n.mustSh("cat > /run/files.sh <<'EOF'\n" + syncedFiles + "\nEOF")
	n.mustSh("cat > /run/bg.sh <<'EOF'\n" + backgroundFiles + "\nEOF")
	n.mustSh("sh /run/files.sh /mnt/db/data /mnt/db/sums 16 before 262144")
	// db's new 96 MiB go right after logs: a deleted volume's signature at
	// what becomes db's new end (a pattern here, written to the array
	// directly, in space no volume uses) must be wiped by the growth.
	logs := strings.Fields(n.mustSh("dmsetup table tc-logs-origin")) // 0 LEN linear MAJ:MIN OFFSET
	logsLen, _ := strconv.ParseInt(logs[1], 10, 64)
	logsOff, _ := strconv.ParseInt(logs[4], 10, 64)
	newEndMiB := (logsOff+logsLen)/2048 + 96
	array := "/dev/" + strings.TrimSpace(n.mustSh("sed -n 's/^DEVNAME=//p' /sys/dev/block/"+logs[3]+"/uevent"))
	n.mustSh(fmt.Sprintf("tr '\\000' '\\245' < /dev/zero | dd of=%s bs=1M seek=%d count=1 iflag=fullblock oflag=direct conv=notrunc 2>/dev/null", array, newEndMiB-1))
	n.mustSh("setsid sh /run/bg.sh /mnt/db/bg /mnt/db/bgsums >/dev/null 2>&1 < /dev/null &")
	n.mustSh("for i in $(seq 100); do [ $(ls /mnt/db/bg | wc -l) -ge 5 ] && exit 0; sleep 0.2; done; exit 1")
	before := n.mustSh("ls /mnt/db/bg | wc -l")
	res := n.tidectl("volume resize db --size 160M")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "resize2fs /dev/mapper/tc-db") {
		t.Fatalf("volume resize: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if got := strings.TrimSpace(n.mustSh("blockdev --getsize64 /dev/mapper/tc-db")); got != strconv.Itoa(160<<20) {
		t.Fatalf("tc-db is %s bytes after resize, want %d", got, 160<<20)
	}
	// logs sits right after db's first extent: db's new 96 MiB are a
	// second line of its origin table, after logs.
	if table := n.mustSh("dmsetup table tc-db-origin"); strings.Count(strings.TrimSpace(table), "\n") != 1 {
		t.Fatalf("tc-db-origin after growing past logs:\n%s\nwant two linear lines", table)
	}
	if got := n.mustSh(fmt.Sprintf("dd if=%s bs=1M skip=%d count=1 iflag=direct 2>/dev/null | tr -d '\\000' | wc -c", array, newEndMiB-1)); strings.TrimSpace(got) != "0" {
		t.Fatalf("the last MiB of db's new space holds %s non-zero bytes after the growth: a stale signature there was not wiped", strings.TrimSpace(got))
	}
	n.mustSh("resize2fs /dev/mapper/tc-db >/dev/null 2>&1")
	if after := n.mustSh("ls /mnt/db/bg | wc -l"); after == before || n.sh("test -e /run/bg.rc").ExitCode == 0 {
		t.Fatalf("the background writer did not go on through the resize: %s files before, %s after, exit %s",
			strings.TrimSpace(before), strings.TrimSpace(after), n.sh("cat /run/bg.rc").Stdout)
	}
	// 16 files of 5-6 MiB: past the old 64 MiB end.
	n.mustSh("sh /run/files.sh /mnt/db/data /mnt/db/sums 16 grown 5242880")
	n.mustSh("touch /run/bg.stop; for i in $(seq 300); do [ -e /run/bg.rc ] && break; sleep 0.2; done; grep -qx 0 /run/bg.rc")
	n.mustSh("cd /mnt/db/bg && sha256sum --quiet -c ../bgsums")
	t.Logf("background writer: %s files acknowledged and verified, %s before the resize", strings.TrimSpace(n.mustSh("wc -l < /mnt/db/bgsums")), strings.TrimSpace(before))

	// XFS on logs, which db's second extent now follows.
	// The test environment variables let mkfs.xfs make one under 300 MB.
	n.mustSh("TEST_DIR=1 TEST_DEV=1 QA_CHECK_FS=1 mkfs.xfs -q -f /dev/mapper/tc-logs && mkdir -p /mnt/logs && mount /dev/mapper/tc-logs /mnt/logs")
	n.mustSh("sh /run/files.sh /mnt/logs/data /mnt/logs/sums 8 before 262144")
	n.mustTidectl("volume resize logs --size 128M")
	if table := n.mustSh("dmsetup table tc-logs-origin"); strings.Count(strings.TrimSpace(table), "\n") != 1 {
		t.Fatalf("tc-logs-origin after growing past db's extent:\n%s\nwant two linear lines", table)
	}
	n.mustSh("xfs_growfs /mnt/logs >/dev/null")
	n.mustSh("sh /run/files.sh /mnt/logs/data /mnt/logs/sums 12 grown 5242880")
	n.mustSh("(cd /mnt/logs/data && sha256sum --quiet -c ../sums) && umount /mnt/logs")
	if used, _ := strconv.Atoi(strings.TrimSpace(n.mustSh("df -k --output=used /mnt/db | tail -1"))); used < 70000 {
		t.Fatalf("only %d KiB used after writing past the old end", used)
	}
	n.mustSh("cd /mnt/db/data && sha256sum --quiet -c ../sums")
	if d := n.volume("db").WriteCache.DirtyBlocks; d == 0 {
		t.Fatal("no dirty blocks before uncache; the test would prove nothing")
	}
	freeBefore := n.mustSh("tidectl -o json pool show tank | grep -o '\"free_bytes\": [0-9]*'")

	res = n.tidectl("volume uncache db")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "volume db uncached") || !strings.Contains(res.Stderr, "dirty") {
		t.Fatalf("volume uncache: exit %d, want the drain's progress and the result:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	v := n.volume("db")
	if v.Mode != "passthrough" || v.WriteCache != nil || v.ReadCache != nil {
		t.Fatalf("after uncache: mode %s, write cache %v, read cache %v", v.Mode, v.WriteCache, v.ReadCache)
	}
	if devs := strings.Join(n.dmDevices(), " "); strings.Count(devs, "tc-db") != 2 {
		t.Errorf("devices after uncache %s, want tc-db over tc-db-origin alone", devs)
	}
	if freeAfter := n.mustSh("tidectl -o json pool show tank | grep -o '\"free_bytes\": [0-9]*'"); freeAfter == freeBefore {
		t.Errorf("free SSD space unchanged by uncache: %s", freeAfter)
	}
	n.mustSh("cd /mnt/db/data && sha256sum --quiet -c ../sums")
	n.wantFail("volume set-mode db writeback", "no write cache")
	if out := n.mustTidectl("volume uncache db"); !strings.Contains(out, "has no cache: nothing to do") {
		t.Errorf("second uncache: %s", out)
	}

	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	n = bootNodeIn(t, dir, bin, smallNode)
	n.mustSh("tidecached assemble")
	if v := n.volume("db"); v.State != "active" || v.Mode != "passthrough" || v.WriteCache != nil || v.SizeBytes != 160<<20 {
		t.Fatalf("after the power cut: state %s, mode %s, write cache %v, %d bytes", v.State, v.Mode, v.WriteCache, v.SizeBytes)
	}
	if v := n.volume("logs"); v.State != "active" || v.SizeBytes != 128<<20 {
		t.Fatalf("logs after the power cut: state %s, %d bytes", v.State, v.SizeBytes)
	}
	n.mustSh("e2fsck -f -n /dev/mapper/tc-db && mkdir -p /mnt/db && mount /dev/mapper/tc-db /mnt/db && cd /mnt/db/data && sha256sum --quiet -c ../sums && ls | wc -l | grep -qx 32")
	n.mustSh("cd /mnt/db/bg && sha256sum --quiet -c ../bgsums")
	n.mustSh("xfs_repair -n /dev/mapper/tc-logs && mkdir -p /mnt/logs && mount /dev/mapper/tc-logs /mnt/logs && cd /mnt/logs/data && sha256sum --quiet -c ../sums && ls | wc -l | grep -qx 20")
}
