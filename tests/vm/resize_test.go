// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"strconv"
	"strings"
	"testing"

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

// TestResizeAndUncache grows, then uncaches, a mounted ext4 volume in
// writeback, and cuts the power after both:
//   - resize: refused for a volume followed by another; the last one
//     grows live, resize2fs grows the filesystem online, and files
//     written past the old end verify;
//   - uncache, with dirty blocks and the filesystem mounted: the drain's
//     progress, then passthrough without caches, two devices left, the
//     pool's SSD space back, the files intact, writeback refused, a
//     second uncache with nothing to do;
//   - after the power cut, assembly brings the volume up at its new size,
//     in passthrough, and every file verifies.
func TestResizeAndUncache(t *testing.T) {
	besideAnother(t)
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	n := bootNodeIn(t, dir, bin, smallNode)
	n.createPool("tank")
	n.mustTidectl("volume create first --size 64M --write-cache 16M --protect none")
	n.mustTidectl("volume create db --size 64M --write-cache 32M --read-cache 16M --protect none")
	n.wantFail("volume resize first --size 128M", "followed by another", "cannot grow in place")
	n.wantFail("volume resize db --size 32M", "tidecache only grows volumes")

	n.mustSh("mkfs.ext4 -q -F " + mkfsOpts + " /dev/mapper/tc-db && mkdir -p /mnt/db && mount /dev/mapper/tc-db /mnt/db")
	n.mustSh("cat > /run/files.sh <<'EOF'\n" + syncedFiles + "\nEOF")
	n.mustSh("sh /run/files.sh /mnt/db/data /mnt/db/sums 16 before 262144")
	res := n.tidectl("volume resize db --size 160M")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "resize2fs /dev/mapper/tc-db") {
		t.Fatalf("volume resize: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if got := strings.TrimSpace(n.mustSh("blockdev --getsize64 /dev/mapper/tc-db")); got != strconv.Itoa(160<<20) {
		t.Fatalf("tc-db is %s bytes after resize, want %d", got, 160<<20)
	}
	n.mustSh("resize2fs /dev/mapper/tc-db >/dev/null 2>&1")
	// 16 files of 5-6 MiB: past the old 64 MiB end.
	n.mustSh("sh /run/files.sh /mnt/db/data /mnt/db/sums 16 grown 5242880")
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
	n.mustSh("e2fsck -f -n /dev/mapper/tc-db && mkdir -p /mnt/db && mount /dev/mapper/tc-db /mnt/db && cd /mnt/db/data && sha256sum --quiet -c ../sums && ls | wc -l | grep -qx 32")
}
