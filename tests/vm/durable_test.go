// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// bootNodeWithout boots a node whose kernel lacks tidecache's fuaflush
// target: what a server looks like before its DKMS module is installed,
// or with Secure Boot refusing an unsigned one.
func bootNodeWithout(t *testing.T, spec nodeSpec) *node {
	t.Helper()
	bin, err := binaries()
	if err != nil {
		t.Fatalf("build binaries: %v", err)
	}
	dir := harness.TestDir(t)
	v := harness.MustBoot(t, harness.Config{Name: "node", Dir: dir, Disks: spec.disks(dir), MemoryMiB: 1536, NoFUAFlushModule: true, CPUs: vmCPUs(t)})
	return &node{VM: v, t: t, bin: bin, dir: dir, spec: spec}
}

// TestFUAFlushRequired checks that without the fuaflush target a write
// cache is refused with an error that names the fix, before anything is
// written; that --allow-fua-window builds it anyway, recorded and shown;
// that a write tier is refused on a mode change too; and that once the
// module is loaded the same commands work.
func TestFUAFlushRequired(t *testing.T) {
	besideAnother(t, 20*time.Second)
	n := bootNodeWithout(t, smallNode)
	if out := n.mustSh("dmsetup targets"); strings.Contains(out, "fuaflush") {
		t.Fatalf("the VM was booted without dm-fuaflush but has the target:\n%s", out)
	}
	n.createPool("tank")
	gen := n.poolGeneration("tank")

	stderr := n.wantFail("volume create db --size 128M --write-cache 32M",
		"fuaflush kernel target", "dm-fuaflush", "DKMS", "mokutil", "--allow-fua-window")
	t.Logf("refusal:\n%s", stderr)
	if got := n.dmDevices(); len(got) != 0 {
		t.Fatalf("a refused create left dm devices: %v", got)
	}
	if g := n.poolGeneration("tank"); g != gen {
		t.Fatalf("a refused create wrote the layout: generation %d -> %d", gen, g)
	}

	// Without a write cache nothing needs the target.
	n.mustTidectl("volume create logs --size 64M --read-cache 16M --mode writethrough")
	if v := n.volume("logs"); v.Mode != "writethrough" || v.State != "active" {
		t.Fatalf("read-cache-only volume: %+v", v)
	}

	// A writethrough volume with a write slice cannot go to writeback.
	n.mustTidectl("volume create db --size 128M --write-cache 32M --mode writethrough")
	n.wantFail("volume set-mode db writeback", "fuaflush kernel target", "--allow-fua-window")
	if v := n.volume("db"); v.Mode != "writethrough" || v.State != "active" {
		t.Fatalf("after a refused switch to writeback: %+v", v)
	}

	// The explicit opt-in: a linear top over the write tier, recorded.
	n.mustTidectl("volume create risky --size 128M --write-cache 32M --allow-fua-window")
	if top := n.mustSh("dmsetup table tc-risky"); !strings.Contains(top, " linear ") {
		t.Fatalf("top of a FUA-window volume: %s", top)
	}
	show := n.mustTidectl("volume show risky")
	if !strings.Contains(show, "FUA WINDOW ACCEPTED") {
		t.Fatalf("volume show does not say the window was accepted:\n%s", show)
	}
	if out := n.mustTidectl("-o json volume show risky"); !strings.Contains(out, `"fua_window": true`) {
		t.Fatalf("json has no fua_window true:\n%s", out)
	}
	n.mustTidectl("volume check risky")

	// Load the module: the write tier can be built now, and a volume that
	// accepted the window keeps what it recorded.
	kver, err := harness.KernelVersion()
	if err != nil {
		t.Fatal(err)
	}
	ko, err := harness.Module(t.Context(), harness.FUAFlush, kver)
	if err != nil {
		t.Fatal(err)
	}
	n.mustSh("insmod " + ko)
	n.mustTidectl("volume set-mode db writeback")
	if top := n.mustSh("dmsetup table tc-db"); !strings.Contains(top, " fuaflush ") {
		t.Fatalf("top after loading the module: %s", top)
	}
	if show := n.mustTidectl("volume show db"); !strings.Contains(show, "every acknowledged write is durable") {
		t.Fatalf("volume show db:\n%s", show)
	}
	n.mustSh("tidecached assemble")
	n.mustTidectl("volume check risky")
	if top := n.mustSh("dmsetup table tc-risky"); !strings.Contains(top, " linear ") {
		t.Fatalf("assemble changed the top of a FUA-window volume: %s", top)
	}
}

// TestLegacyStackMigration builds, by hand, the stack tidecache made before
// the fuaflush target (dm-writecache as the top device), puts a mounted
// ext4 with dirty cache blocks on it and a writer running, and checks that
// `tidecached assemble` moves the volume to the current stack live: the
// filesystem stays mounted, the writer keeps writing, every file reads back
// with its checksum, and fsck is clean.
func TestLegacyStackMigration(t *testing.T) {
	besideAnother(t, 20*time.Second)
	n := bootNode(t, smallNode)
	n.createPool("tank")
	n.mustTidectl("volume create db --size 256M --write-cache 64M --read-cache 32M")
	n.mustTidectl("volume flush db")

	// The old stack: tc-db is dm-writecache over the read tier, no wtier
	// and no readfirst layer.
	n.mustSh(`set -e
sz=$(blockdev --getsz /dev/mapper/tc-db)
rt=$(dmsetup info -c --noheadings --separator : -o major,minor tc-db-rtier | tr -d ' ')
wc=$(dmsetup table tc-db-wtier | cut -d' ' -f3- | awk -v rt="$rt" '{$3 = rt; print}')
dmsetup suspend tc-db
dmsetup load tc-db --table "0 $sz linear /dev/mapper/tc-db-rtier 0"
dmsetup resume tc-db
dmsetup remove tc-db-wtier
dmsetup remove tc-db-rfirst
dmsetup suspend tc-db
dmsetup load tc-db --table "0 $sz $wc"
dmsetup resume tc-db`)
	if top := n.mustSh("dmsetup table tc-db"); !strings.Contains(top, " writecache ") {
		t.Fatalf("hand-made old stack: %s", top)
	}
	if show := n.mustTidectl("volume show db"); !strings.Contains(show, "OLD STACK") {
		t.Fatalf("volume show does not flag the old stack:\n%s", show)
	}

	n.mustSh("mkfs.ext4 -q /dev/mapper/tc-db && mkdir -p /mnt/db && mount /dev/mapper/tc-db /mnt/db")
	n.mustSh("dd if=/dev/urandom of=/mnt/db/data bs=1M count=24 status=none && sync && md5sum /mnt/db/data > /run/data.md5")
	if v := n.volume("db"); v.WriteCache == nil || v.WriteCache.DirtyBlocks == 0 {
		t.Fatalf("the old write tier should hold dirty blocks before the migration: %+v", v.WriteCache)
	}
	// A writer that appends and fsyncs through the whole migration.
	n.mustSh(`(i=0; while [ ! -e /run/stop ]; do i=$((i+1)); echo "line $i" >> /mnt/db/log; sync /mnt/db/log; done; echo $i > /run/lines) >/dev/null 2>&1 &`)

	out := n.mustSh("tidecached assemble 2>&1")
	t.Logf("assemble:\n%s", out)
	if !strings.Contains(out, "migrated") {
		t.Fatalf("assemble did not report the migration:\n%s", out)
	}
	n.mustSh("touch /run/stop; while [ ! -e /run/lines ]; do sleep 0.2; done")
	lines := strings.TrimSpace(n.mustSh("cat /run/lines"))
	t.Logf("writer appended %s lines during the migration", lines)

	want := []string{"tc-db", "tc-db-origin", "tc-db-rdata", "tc-db-rfirst", "tc-db-rmeta", "tc-db-rtier", "tc-db-wdata", "tc-db-wtier"}
	if got := n.dmDevices(); !slices.Equal(got, want) {
		t.Fatalf("devices after migration %v, want %v", got, want)
	}
	if top := n.mustSh("dmsetup table tc-db"); !strings.Contains(top, " fuaflush ") {
		t.Fatalf("top after migration: %s", top)
	}
	n.mustTidectl("volume check db")
	if !strings.Contains(n.mustSh("findmnt -n /mnt/db"), "tc-db") {
		t.Fatal("the filesystem is no longer mounted")
	}
	n.mustSh("md5sum -c /run/data.md5")
	if got := strings.TrimSpace(n.mustSh("tail -n1 /mnt/db/log")); got != "line "+lines {
		t.Fatalf("last log line %q, want %q", got, "line "+lines)
	}
	n.mustSh("umount /mnt/db && e2fsck -fn /dev/mapper/tc-db")
	// A second assemble has nothing left to migrate.
	if out := n.mustSh("tidecached assemble 2>&1"); strings.Contains(out, "migrated") {
		t.Fatalf("second assemble migrated again:\n%s", out)
	}
}
