//go:build vm

package vm_test

import (
	"strings"
	"testing"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// adoptNode has a user's existing md RAID10 over four HDDs (made by the
// test with mdadm, as an administrator would have) and one SSD for a pool
// of SSDs alone.
var adoptNode = nodeSpec{HDDs: 4, HDDSize: 96 << 20, SSDs: []int64{160 << 20}}

// adoptFiles writes n files of random data under dir, fsyncs each, and
// appends their checksums to dir/../<list>.
const adoptFiles = `set -e
dir=$1 list=$2 n=$3 tag=$4
mkdir -p $dir
for i in $(seq 1 $n); do
	head -c $((256 * 1024 + i * 4096)) /dev/urandom > $dir/$tag-$i
	sync $dir/$tag-$i
done
(cd $dir && sha256sum $tag-*) >> $list
sync`

// TestAdoptDetach caches an md array that already holds a filesystem,
// without copying it:
//   - the refusals: the array mounted (the message gives the steps), the
//     pool's own SSD;
//   - adopt: nothing is written to the array (its first 4 MiB and its md
//     superblock area hash the same), the filesystem reads back through
//     /dev/mapper/tc-db;
//   - writes through the cache, then a power cut with dirty blocks on the
//     SSD: boot assembly finds the array by its md UUID (it assembles it:
//     nothing else does here) and every fsync'd file reads back;
//   - detach: drained, devices gone, and the bare array mounted again
//     holds every file, old and new, and passes fsck.
func TestAdoptDetach(t *testing.T) {
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	n := bootNodeIn(t, dir, bin, adoptNode)
	hdds, ssd := n.hdds(), n.ssds()[0]
	n.mustSh("mdadm --create /dev/md/data --run --metadata=1.2 --homehost=any --name=data --level=10 --raid-devices=4 --assume-clean " + strings.Join(hdds, " "))
	n.mustSh("mkfs.ext4 -q -F " + mkfsOpts + " /dev/md/data && mkdir -p /srv/db && mount /dev/md/data /srv/db")
	n.mustSh("cat > /run/files.sh <<'EOF'\n" + adoptFiles + "\nEOF")
	n.mustSh("sh /run/files.sh /srv/db/data /srv/db/sums 24 before")
	n.mustTidectl("pool create fast --ssd " + ssd)
	if out := n.mustTidectl("pool show fast"); !strings.Contains(out, "none: SSDs only") {
		t.Errorf("pool show of a pool of SSDs alone:\n%s", out)
	}

	// Refusals, each changing nothing.
	n.wantFail("volume adopt db --device /dev/md/data --write-cache 48M", "is in use", "mounted at /srv/db", "umount", "/dev/mapper/tc-db", "/etc/fstab")
	n.wantFail("volume create db --size 32M --write-cache 16M", "has no origin (SSDs only)", "volume adopt")
	n.mustSh("umount /srv/db")
	n.wantFail("volume adopt db --device "+ssd+" --write-cache 48M", "holds a tidecache superblock (pool fast)")
	// ext4 on a small array has 1 KiB blocks: a 4 KiB write cache would
	// make a device it cannot be mounted on.
	n.wantFail("volume adopt db --device /dev/md/data --write-cache 48M --block-size 4096",
		"larger than the 1024-byte unit of the ext4 filesystem", "--block-size 1024")

	// Adopting writes nothing to the array: the first 4 MiB, where a
	// pool's origin carries its superblock, read the same before and
	// after (the array's own md superblock is at its members' heads).
	head := "dd if=/dev/md/data bs=1M count=4 status=none | sha256sum"
	uuid := "mdadm --detail /dev/md/data | grep -E '^ *UUID'"
	before, arrayUUID := n.mustSh(head), n.mustSh(uuid)
	res := n.tidectl("volume adopt db --device /dev/md/data --write-cache 48M")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "Caches:       /dev/md/data (md uuid") || !strings.Contains(res.Stderr, "1024-byte blocks") {
		t.Fatalf("volume adopt: exit %d, want the device named and its 1 KiB blocks noted:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if after := n.mustSh(head); after != before {
		t.Errorf("adopting wrote to the array's first 4 MiB: sha256 %s before, %s after", before, after)
	}
	n.mustSh("mount /dev/mapper/tc-db /srv/db && cd /srv/db/data && sha256sum --quiet -c ../sums")
	n.mustSh("sh /run/files.sh /srv/db/data /srv/db/sums 24 cached")
	if d := n.volume("db").WriteCache.DirtyBlocks; d == 0 {
		t.Fatal("no dirty blocks in the write cache before the power cut; the test would prove nothing")
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}

	n = bootNodeIn(t, dir, bin, adoptNode)
	asm := n.mustSh("tidecached assemble 2>&1")
	if v := n.volume("db"); v.State != "active" {
		t.Fatalf("after the power cut, volume db is %s, want active:\n%s", v.State, asm)
	}
	n.mustSh("mkdir -p /srv/db && mount /dev/mapper/tc-db /srv/db && cd /srv/db/data && sha256sum --quiet -c ../sums")
	if got := strings.Count(n.mustSh("cat /srv/db/sums"), "\n"); got != 48 {
		t.Fatalf("%d checksums recorded, want 48 (24 before, 24 cached)", got)
	}
	n.mustSh("umount /srv/db")
	n.wantFail("volume delete db", "holds your data", "tidectl volume detach db")

	res = n.tidectl("volume detach db")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "is a plain device again") {
		t.Fatalf("volume detach: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if devs := n.dmDevices(); len(devs) != 0 {
		t.Fatalf("devices left after detach: %v", devs)
	}
	if got := n.mustSh(uuid); got != arrayUUID {
		t.Errorf("the array after detach is another one: %s, was %s", got, arrayUUID)
	}
	n.mustSh("e2fsck -f -n /dev/md/data")
	n.mustSh("mount /dev/md/data /srv/db && cd /srv/db/data && sha256sum --quiet -c ../sums && ls | wc -l | grep -qx 48")
}
