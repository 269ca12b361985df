// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// Bad input gets a clear error and changes nothing. Every case checks that
// the command fails, that its message names the problem and the device, and
// that the node is as it was: same bytes at the head of every disk (where
// superblocks, md metadata and filesystem signatures live), no new md array,
// no new dm device, same pool generation.
//
// Overlapping extents cannot be asked for on the command line (the
// allocator only hands out free space); they can only come from a damaged
// or hand-edited layout, which Layout.Validate refuses on every read and
// before every write: see pkg/pool (TestValidate*, "overlap" cases) and
// pkg/superblock (format_test.go, "invalid layout").

// on returns the node bound to a subtest, so helpers fail that subtest.
func (n *node) on(t *testing.T) *node {
	c := *n
	c.t = t
	return &c
}

// diskState is what must not change when a command is refused: a hash of
// the heads of the given devices (default: every disk), the running md
// arrays and the dm devices. The hash covers the first 64 KiB (partition
// tables, filesystem and md superblocks, tidecache's slot A header and
// payload) and 64 KiB at 1 MiB (slot B): every superblock write rewrites
// a slot from its start.
//
// While an md array runs, hash the array rather than its disks: md
// rewrites its own superblocks when the array goes idle after writes.
func (n *node) diskState(devs ...string) string {
	n.t.Helper()
	list := "/dev/vd?"
	if len(devs) > 0 {
		list = strings.Join(devs, " ")
	}
	return n.mustSh(`for d in ` + list + `; do printf '%s ' $d; { dd if=$d bs=64k count=1 iflag=direct status=none; dd if=$d bs=64k skip=16 count=1 iflag=direct status=none; } | md5sum; done
grep ^md /proc/mdstat | sort || true
dmsetup ls | sort`)
}

// unchanged fails the test when diskState differs from before.
func (n *node) unchanged(before string, devs ...string) {
	n.t.Helper()
	if after := n.diskState(devs...); after != before {
		n.t.Errorf("a refused command changed the node:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// noPools checks that no pool was written anywhere.
func (n *node) noPools() {
	n.t.Helper()
	if out := strings.TrimSpace(n.mustTidectl("-o json pool show")); out != "[]" {
		n.t.Errorf("pool show after a refused create: %s", out)
	}
}

// signature returns what blkid -p finds on a device (TYPE or PTTYPE), or
// "" for nothing.
func (n *node) signature(dev string) string {
	n.t.Helper()
	res := n.sh("blkid -p -o export " + dev)
	if res.ExitCode == 2 {
		return ""
	}
	if res.ExitCode != 0 {
		n.t.Fatalf("blkid -p %s: exit %d: %s", dev, res.ExitCode, res.Stderr)
	}
	var types []string
	for _, l := range strings.Split(res.Stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "TYPE="); ok {
			types = append(types, v)
		}
		if v, ok := strings.CutPrefix(l, "PTTYPE="); ok {
			types = append(types, v)
		}
	}
	return strings.Join(types, ",")
}

// mkfsOpts makes ext4 initialise its inode tables and journal at mkfs
// time: otherwise the kernel does it in the background after mount and
// the disk changes under a test that checks it does not.
const mkfsOpts = "-E lazy_itable_init=0,lazy_journal_init=0"

// badInputNode: four HDDs for the RAID10, one SSD, six spare disks to
// carry signatures and a 32 MiB one, too small to be an SSD member.
var badInputNode = nodeSpec{
	HDDs: 4, HDDSize: 256 << 20, SSDs: []int64{256 << 20},
	Spares:   []int64{256 << 20, 256 << 20, 256 << 20, 256 << 20, 256 << 20, 256 << 20, 32 << 20},
	MemoryMB: 1024,
}

// dosLabel writes a DOS partition table with one Linux partition (2048
// sectors from sector 2048) to a device, as fdisk would, and makes the
// kernel read it: no partitioning tool is needed in the guest.
func dosLabel(dev string) string {
	entry := `\000\000\002\000\203\377\377\377\000\010\000\000\000\010\000\000`
	return fmt.Sprintf(`printf '%s' | dd of=%[2]s bs=1 seek=446 conv=notrunc status=none
printf '\125\252' | dd of=%[2]s bs=1 seek=510 conv=notrunc status=none
sync; blockdev --rereadpt %[2]s`, entry, dev)
}

func TestBadInputPoolCreate(t *testing.T) {
	besideAnother(t, 80*time.Second)
	n := bootNode(t, badInputNode)
	ssd := n.ssds()[0]
	sp := n.spares()
	raid := "pool create tank --assume-clean --raid10 " + strings.Join(n.hdds(), ",") + " --ssd " + ssd
	// The mdadm array of the RAID case is made on two spares and stopped:
	// their md superblocks stay.
	n.mustSh(fmt.Sprintf("mdadm --create /dev/md/junk --run --assume-clean --level=1 --raid-devices=2 --metadata=1.2 %s %s && mdadm --stop /dev/md/junk", sp[1], sp[2]))

	for _, c := range []struct {
		name  string
		setup string // shell, run once before the command
		args  string
		want  []string
		sig   string // device whose signature must still be there
		clean string // shell, undoes setup
	}{
		{
			name:  "filesystem on an SSD",
			setup: "mkfs.ext4 -q -F " + mkfsOpts + " " + sp[0],
			args:  raid + " --ssd " + sp[0],
			want:  []string{sp[0], "ext4", "--force"},
			sig:   sp[0],
		},
		{
			name:  "filesystem on an HDD",
			setup: "mkfs.ext4 -q -F " + mkfsOpts + " " + n.hdds()[0],
			args:  raid,
			want:  []string{n.hdds()[0], "ext4", "--force"},
			sig:   n.hdds()[0],
			clean: "wipefs -a -q " + n.hdds()[0],
		},
		{
			name: "filesystem on the origin",
			args: "pool create tank --origin " + sp[0] + " --ssd " + ssd,
			want: []string{sp[0], "ext4", "--force"},
			sig:  sp[0],
		},
		{
			name: "RAID member as SSD",
			args: raid + " --ssd " + sp[1],
			want: []string{sp[1], "linux_raid_member", "--force"},
			sig:  sp[1],
		},
		{
			name: "RAID member as origin",
			args: "pool create tank --origin " + sp[2] + " --ssd " + ssd,
			want: []string{sp[2], "linux_raid_member", "--force"},
			sig:  sp[2],
		},
		{
			name:  "partition table",
			setup: dosLabel(sp[3]),
			args:  raid + " --ssd " + sp[3],
			want:  []string{sp[3], "dos", "partition_table", "--force"},
			sig:   sp[3],
		},
		{
			name:  "mounted, even with --force",
			setup: "mkfs.ext4 -q -F " + mkfsOpts + " " + sp[4] + " && mkdir -p /mnt/sp && mount " + sp[4] + " /mnt/sp",
			args:  raid + " --force --ssd " + sp[4],
			want:  []string{sp[4], "in use", "mounted at /mnt/sp"},
			sig:   sp[4],
		},
		{
			name:  "mounted",
			args:  raid + " --ssd " + sp[4],
			want:  []string{sp[4], "in use", "mounted at /mnt/sp"},
			sig:   sp[4],
			clean: "umount /mnt/sp",
		},
		{
			name:  "held by a dm device, even with --force",
			setup: "dmsetup create holder --table '0 8192 linear " + sp[5] + " 0'",
			args:  raid + " --force --ssd " + sp[5],
			want:  []string{sp[5], "in use", "held by", "(holder)"},
		},
		{
			name:  "held by a dm device, as origin",
			args:  "pool create tank --force --origin " + sp[5] + " --ssd " + ssd,
			want:  []string{sp[5], "in use", "held by", "(holder)"},
			clean: "dmsetup remove holder",
		},
		{
			name: "missing SSD",
			args: raid + " --ssd /dev/vdz",
			want: []string{"/dev/vdz", "does not exist"},
		},
		{
			name: "missing origin",
			args: "pool create tank --origin /dev/vdz --ssd " + ssd,
			want: []string{"/dev/vdz", "does not exist"},
		},
		{
			name: "missing RAID10 disk",
			args: "pool create tank --assume-clean --raid10 " + strings.Join(n.hdds()[:3], ",") + ",/dev/vdz --ssd " + ssd,
			want: []string{"/dev/vdz", "does not exist"},
		},
		{
			name: "SSD too small",
			args: raid + " --ssd " + sp[6],
			want: []string{sp[6], "too small", "32 MiB", "64 MiB"},
		},
		{
			name: "same device twice",
			args: raid + " --ssd " + ssd,
			want: []string{ssd, "same device"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := n.on(t)
			if c.setup != "" {
				n.mustSh(c.setup)
			}
			before := n.diskState()
			var sig string
			if c.sig != "" {
				if sig = n.signature(c.sig); sig == "" {
					t.Fatalf("setup left no signature on %s", c.sig)
				}
			}
			msg := n.wantFail(c.args, c.want...)
			t.Logf("tidectl %s:\n%s", c.args, strings.TrimSpace(msg))
			n.unchanged(before)
			n.noPools()
			if c.sig != "" {
				if got := n.signature(c.sig); got != sig {
					t.Errorf("signature of %s: %q, was %q", c.sig, got, sig)
				}
			}
			if c.clean != "" {
				n.mustSh(c.clean)
			}
		})
	}

	// --force takes devices with signatures (not ones in use): here an SSD
	// with ext4, a RAID10 disk with ext4 and a stopped md array's member.
	t.Run("force overwrites signatures", func(t *testing.T) {
		n := n.on(t)
		res := n.tidectl(raid + " --force --ssd " + sp[0] + " --ssd " + sp[1])
		if res.ExitCode != 0 {
			t.Fatalf("pool create --force: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
		if !strings.Contains(res.Stderr, "--force") || !strings.Contains(res.Stderr, sp[0]) {
			t.Errorf("pool create --force does not warn about the overwritten devices:\n%s", res.Stderr)
		}
		if g := n.poolGeneration("tank"); g != 1 {
			t.Errorf("new pool at generation %d, want 1", g)
		}
		for _, d := range []string{ssd, sp[0]} {
			if sig := n.signature(d); strings.Contains(sig, "ext4") {
				t.Errorf("%s still reads as %s after --force", d, sig)
			}
		}
		// A second pool of the same name is refused, and changes nothing.
		before := n.diskState()
		n.wantFail("pool create tank --origin "+sp[3]+" --ssd "+sp[4]+" --force", "tank", "already exists")
		n.unchanged(before)
		if g := n.poolGeneration("tank"); g != 1 {
			t.Errorf("generation %d after a refused create, want 1", g)
		}
		// Members of a pool are refused as members of another.
		n.wantFail("pool create other --origin "+sp[3]+" --ssd "+sp[0], sp[0], "SSD member of tidecache pool \"tank\"", "--destroy-pool tank")
		n.unchanged(before)
	})
	// A node without SSDs keeps a pool of its origin alone: its volumes run
	// on the HDDs, and one that asks for a cache on the node is refused
	// with the reason, changing nothing.
	t.Run("pool without SSDs", func(t *testing.T) {
		n := n.on(t)
		n.mustTidectl("pool create slow --origin " + sp[5])
		var pools []struct {
			Origin struct {
				Path string `json:"path"`
			} `json:"origin"`
			Members []json.RawMessage `json:"members"`
		}
		if err := json.Unmarshal([]byte(n.mustTidectl("-o json pool show slow")), &pools); err != nil || len(pools) != 1 {
			t.Fatalf("pool show slow: %d pools, %v", len(pools), err)
		}
		if p := pools[0]; p.Origin.Path != sp[5] || len(p.Members) != 0 {
			t.Fatalf("pool slow: origin %q, %d SSDs; want %s and none", p.Origin.Path, len(p.Members), sp[5])
		}
		gen := n.poolGeneration("slow")
		before := n.diskState(sp[5])
		n.wantFail("volume create cached --pool slow --size 64M --write-cache 32M", `pool "slow" has no SSDs`, "--mode passthrough")
		n.unchanged(before, sp[5])
		if g := n.poolGeneration("slow"); g != gen {
			t.Errorf("generation %d after a refused volume, want %d", g, gen)
		}
		n.mustTidectl("volume create plain --pool slow --size 64M --mode passthrough")
		n.mustSh("printf tidecache | dd of=/dev/mapper/tc-plain bs=4k conv=sync,fsync oflag=direct status=none")
		if got := n.mustSh("dd if=" + sp[5] + " bs=4k skip=$(( $(dmsetup table tc-plain-origin | awk '{print $5}') / 8 )) count=1 iflag=direct status=none | head -c 9"); got != "tidecache" {
			t.Errorf("origin holds %q where the volume's first block is, want the block written through it", got)
		}
		n.mustTidectl("volume delete plain")
		n.mustTidectl("pool delete slow")
	})
}

// volumeNode: the RAID10 origin has 512 MiB, the SSD 256 MiB.
var volumeNode = nodeSpec{HDDs: 4, HDDSize: 256 << 20, SSDs: []int64{256 << 20}, MemoryMB: 1024}

func TestBadInputVolume(t *testing.T) {
	besideAnother(t, 50*time.Second)
	n := bootNode(t, volumeNode)
	n.createPool("tank")
	var pools []struct {
		Origin struct {
			Path string `json:"path"`
		} `json:"origin"`
	}
	if err := json.Unmarshal([]byte(n.mustTidectl("-o json pool show")), &pools); err != nil || len(pools) != 1 {
		t.Fatalf("pool show: %v", err)
	}
	origin := pools[0].Origin.Path
	heads := []string{n.ssds()[0], origin}

	// refused runs a tidectl command expected to fail and checks that the
	// layout generation, the dm devices and the superblock areas are
	// unchanged.
	refused := func(n *node, args string, want ...string) string {
		n.t.Helper()
		gen := n.poolGeneration("tank")
		before := n.diskState(heads...)
		msg := n.wantFail(args, want...)
		n.t.Logf("tidectl %s:\n%s", args, strings.TrimSpace(msg))
		n.unchanged(before, heads...)
		if g := n.poolGeneration("tank"); g != gen {
			n.t.Errorf("pool generation %d after a refused command, was %d", g, gen)
		}
		return msg
	}

	t.Run("no space", func(t *testing.T) {
		for _, c := range []struct {
			name, args string
			want       []string
		}{
			{"volume bigger than the origin", "--size 1G --write-cache 16M",
				[]string{"not enough free space on origin " + origin, "1 GiB", "largest free extent"}},
			{"write cache bigger than the SSD", "--size 64M --write-cache 1G",
				[]string{"not enough free space on the SSDs", "1 GiB", "/dev/vde"}},
			{"read cache bigger than the SSD", "--size 64M --write-cache 16M --read-cache 300M",
				[]string{"not enough free space on the SSDs", "300 MiB"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				n := n.on(t)
				refused(n, "volume create big "+c.args, c.want...)
				n.wantFail("volume show big", "not found")
			})
		}
	})

	t.Run("invalid names", func(t *testing.T) {
		long := strings.Repeat("a", 49)
		for _, c := range []struct {
			name, arg string
			want      []string
		}{
			{"uppercase", "DB", []string{`"DB"`, "only a-z, 0-9 and '-'"}},
			{"underscore", "my_db", []string{`"my_db"`, "only a-z, 0-9 and '-'"}},
			{"49 characters", long, []string{long, "longer than 48"}},
			{"leading dash", "-- -db", []string{`"-db"`, "must start with a letter or digit"}},
			{"trailing dash", "db-", []string{`"db-"`, "must end with a letter or digit"}},
			{"double dash", "a--b", []string{`"a--b"`, `"--"`}},
			{"reserved suffix", "db-origin", []string{`"db-origin"`, `"-origin"`, "reserved"}},
			{"reserved suffix wdata", "x-wdata", []string{`"x-wdata"`, "reserved"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				n := n.on(t)
				// Flags first: after "--" everything is an argument.
				refused(n, "volume create --size 64M --write-cache 16M "+c.arg, append([]string{"invalid volume name"}, c.want...)...)
			})
		}
		t.Run("48 characters are fine", func(t *testing.T) {
			n := n.on(t)
			name := strings.Repeat("b", 48)
			n.mustTidectl("volume create " + name + " --size 64M --write-cache 16M")
			n.mustTidectl("volume delete " + name)
		})
	})

	t.Run("duplicate name", func(t *testing.T) {
		n := n.on(t)
		n.mustTidectl("volume create db --size 64M --write-cache 16M")
		refused(n, "volume create db --size 32M --write-cache 8M", "db", "already exists")
		if v := n.volume("db"); v.SizeBytes != 64<<20 || v.State != "active" {
			t.Errorf("volume after a refused duplicate: %+v", v)
		}
		n.mustTidectl("volume delete db")
	})

	t.Run("delete with dirty data", func(t *testing.T) {
		n := n.on(t)
		n.mustTidectl("volume create dirty --size 64M --write-cache 32M")
		// 8 MiB of a 32 MiB write cache: below dm-writecache's 50 % high
		// watermark, so the blocks stay dirty.
		n.mustSh("dd if=/dev/urandom of=/dev/mapper/tc-dirty bs=1M count=8 oflag=direct status=none")
		dirty := n.volume("dirty").WriteCache.DirtyBlocks
		if dirty == 0 {
			t.Fatal("no dirty blocks after 8 MiB of writes")
		}
		msg := refused(n, "volume delete dirty", "dirty", "flush", "tidectl volume flush dirty", "--force")
		if !strings.Contains(msg, fmt.Sprint(dirty)) {
			t.Errorf("message does not say how many blocks are dirty (%d): %s", dirty, msg)
		}
		if v := n.volume("dirty"); v.State != "active" || v.WriteCache == nil || v.WriteCache.DirtyBlocks == 0 {
			t.Errorf("volume after a refused delete: %+v", v)
		}
		res := n.tidectl("volume delete dirty --force")
		if res.ExitCode != 0 {
			t.Fatalf("delete --force: exit %d\n%s", res.ExitCode, res.Stderr)
		}
		if !strings.Contains(res.Stderr, "warning") || !strings.Contains(res.Stderr, "dirty") {
			t.Errorf("delete --force of a dirty volume gave no warning on stderr:\n%s", res.Stderr)
		}
		t.Logf("delete --force stderr:\n%s", strings.TrimSpace(res.Stderr))
		if devs := n.dmDevices(); len(devs) != 0 {
			t.Errorf("devices left after delete --force: %v", devs)
		}
		n.wantFail("volume show dirty", "not found")
	})

	t.Run("delete of an open volume", func(t *testing.T) {
		for _, c := range []struct {
			name, hold, release string
		}{
			{"mounted", "mkfs.ext4 -q " + mkfsOpts + " /dev/mapper/tc-busy && mkdir -p /mnt/busy && mount /dev/mapper/tc-busy /mnt/busy", "umount /mnt/busy"},
			{"held by a process",
				"sleep 600 < /dev/mapper/tc-busy > /dev/null 2>&1 & echo $! > /root/holder.pid",
				"kill $(cat /root/holder.pid); while [ $(dmsetup info -c --noheadings -o open tc-busy) != 0 ]; do sleep 0.1; done"},
		} {
			t.Run(c.name, func(t *testing.T) {
				n := n.on(t)
				n.mustTidectl("volume create busy --size 64M --write-cache 16M")
				n.mustSh(c.hold)
				devs := n.dmDevices()
				for _, force := range []string{"", " --force"} {
					refused(n, "volume delete busy"+force, "busy", "in use", "/dev/mapper/tc-busy", "unmount")
				}
				if got := n.dmDevices(); !slices.Equal(got, devs) {
					t.Errorf("devices %v, were %v", got, devs)
				}
				n.mustSh(c.release)
				// mkfs left dirty blocks: flush them, then delete.
				n.mustTidectl("volume flush busy")
				n.mustTidectl("volume delete busy")
			})
		}
	})
}

// corruptSlot overwrites 4 bytes of a superblock slot (0 = slot A at byte 0,
// 1 = slot B at 1 MiB) at offset off inside the slot: off < 64 hits the
// header (its CRC fails), off >= 64 the JSON payload (its CRC fails).
func corruptSlot(dev string, slot, off int) string {
	return fmt.Sprintf(`printf '\377\376\375\374' | dd of=%s bs=1 seek=%d conv=notrunc status=none && sync`, dev, slot<<20+off)
}

// removeVolumeDevices removes a volume's dm devices (tc-<vol> and
// tc-<vol>-<role>, whatever layers its stack has) top-down, as a node that
// shut down would have none: each pass removes the devices nothing holds.
func removeVolumeDevices(vol string) string {
	list := fmt.Sprintf(`dmsetup ls | awk '$1 == "tc-%[1]s" || index($1, "tc-%[1]s-") == 1 {print $1}'`, vol)
	return fmt.Sprintf(`for pass in 1 2 3 4 5 6 7 8; do for d in $(%[1]s); do dmsetup remove $d 2>/dev/null; done; done; [ -z "$(%[1]s)" ] || { echo "devices of %[2]s left:" $(%[1]s) >&2; false; }`, list, vol)
}

func TestBadInputCorruptSuperblock(t *testing.T) {
	besideAnother(t, 50*time.Second)
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := harness.TestDir(t)
	n := bootNodeIn(t, dir, bin, twoSSDs)
	n.createPool("tank") // generation 1: slot A of every device
	// One copy of the write cache: a pool with a damaged SSD is refused
	// as a whole (TestReplicaLocalMirror covers the one exception, an SSD
	// holding only mirror legs).
	n.mustTidectl("volume create vol --size 64M --write-cache 32M --protect none")
	if g := n.poolGeneration("tank"); g != 2 { // generation 2: slot B
		t.Fatalf("generation %d after one volume, want 2", g)
	}
	job := fioJob("/dev/mapper/tc-vol", "sb", "randwrite", "0", "8M")
	n.fio(job + " --do_verify=1 --fsync_on_close=1")
	if n.volume("vol").WriteCache.DirtyBlocks == 0 {
		t.Fatal("no dirty blocks: the test would not show the cache is used")
	}
	ssds := n.ssds()
	// Keep the superblock areas to restore them between cases.
	for i, d := range ssds {
		n.mustSh(fmt.Sprintf("dd if=%s of=/root/sb%d bs=1M count=2 iflag=direct status=none", d, i))
	}
	restore := func(n *node) {
		n.t.Helper()
		for i, d := range ssds {
			n.mustSh(fmt.Sprintf("dd if=/root/sb%d of=%s bs=1M count=2 conv=notrunc oflag=direct status=none", i, d))
		}
	}

	for _, c := range []struct {
		name    string
		corrupt []string
	}{
		{"older slot of one SSD", []string{corruptSlot(ssds[1], 0, 100)}},
		{"older slot of every SSD", []string{corruptSlot(ssds[0], 0, 20), corruptSlot(ssds[1], 0, 100)}},
		{"newer slot of one SSD", []string{corruptSlot(ssds[1], 1, 24)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := n.on(t)
			n.mustSh(removeVolumeDevices("vol"))
			for _, s := range c.corrupt {
				n.mustSh(s)
			}
			res := n.sh("tidecached assemble")
			if res.ExitCode != 0 {
				t.Fatalf("assemble with one good slot per SSD: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
			}
			if !strings.Contains(res.Stdout, "/dev/mapper/tc-vol") {
				t.Errorf("assemble did not bring the volume back:\n%s", res.Stdout)
			}
			if v := n.volume("vol"); v.State != "active" || v.Mode != "writeback" || v.WriteCache == nil || v.WriteCache.DirtyBlocks == 0 {
				t.Errorf("volume after assembly: %+v", v)
			}
			if g := n.poolGeneration("tank"); g != 2 {
				t.Errorf("generation %d after assembly, want 2", g)
			}
			n.fio(job + " --verify_only")
			restore(n)
		})
	}

	// The newest slot damaged on every SSD: the SSDs alone hold only the
	// previous generation, which lacks the volume; the origin, written
	// after every SSD, still has the newest. Assembly must use it (never
	// bring the pool up without the volume, whose dirty blocks would be
	// lost and whose extents a new volume could reuse) and repair the
	// SSDs' superblocks from it.
	t.Run("newer slot of every SSD", func(t *testing.T) {
		n := n.on(t)
		n.mustSh(removeVolumeDevices("vol"))
		n.mustSh(corruptSlot(ssds[0], 1, 100) + " && " + corruptSlot(ssds[1], 1, 100))
		res := n.sh("tidecached assemble")
		t.Logf("assemble: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
		if res.ExitCode != 0 || !strings.Contains(res.Stdout, "/dev/mapper/tc-vol") {
			t.Fatalf("assemble did not bring back volume vol from the origin's newer layout (generation %d)", n.poolGeneration("tank"))
		}
		var pools []struct {
			Generation uint64 `json:"generation"`
			Members    []struct {
				Path       string `json:"path"`
				Generation uint64 `json:"generation"`
			} `json:"members"`
		}
		out := n.mustTidectl("-o json pool show")
		if err := json.Unmarshal([]byte(out), &pools); err != nil || len(pools) != 1 {
			t.Fatalf("pool show: %v\n%s", err, out)
		}
		if pools[0].Generation != 2 {
			t.Errorf("generation %d after assembly, want 2", pools[0].Generation)
		}
		for _, m := range pools[0].Members {
			if m.Generation != 2 {
				t.Errorf("SSD %s still at generation %d after assembly: not repaired", m.Path, m.Generation)
			}
		}
		n.fio(job + " --verify_only")
		restore(n)
	})

	// The cases below start from a fresh boot of the same disks (the VM
	// of a subtest ends with it): no dm device, no md array assembled.
	reboot := func(t *testing.T) *node {
		t.Helper()
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
		return bootNodeIn(t, dir, bin, twoSSDs)
	}

	// As above, at boot with the origin array not assembled yet: scan
	// cannot see the origin's newer layout at first, so assembly starts the
	// md origin, looks again, and goes on with the origin's newer layout,
	// in one run.
	t.Run("newer slot of every SSD at boot", func(t *testing.T) {
		n := reboot(t)
		n.mustSh(corruptSlot(ssds[0], 1, 100) + " && " + corruptSlot(ssds[1], 1, 100))
		res := n.sh("tidecached assemble")
		if res.ExitCode != 0 || !strings.Contains(res.Stdout, "/dev/mapper/tc-vol") {
			t.Fatalf("assemble with the origin ahead of the SSDs: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
		if g := n.poolGeneration("tank"); g != 2 {
			t.Errorf("generation %d after assembly, want 2", g)
		}
		n.fio(job + " --verify_only")
	})

	// Both slots of an SSD damaged: nothing says what the pool holds, so
	// it is refused as a whole at boot, naming the device, and no device
	// of it is created.
	t.Run("both slots of one SSD", func(t *testing.T) {
		n := reboot(t)
		n.mustSh("mdadm --assemble --scan --config=partitions") // as udev would at boot
		n.mustSh(corruptSlot(ssds[1], 0, 100) + " && " + corruptSlot(ssds[1], 1, 8))
		res := n.sh("tidecached assemble")
		t.Logf("assemble:\n%s%s", res.Stdout, res.Stderr)
		if res.ExitCode == 0 {
			t.Fatalf("assemble with a damaged SSD succeeded:\n%s", res.Stdout)
		}
		for _, want := range []string{"DAMAGED", "pool tank: REFUSED", ssds[1], "damaged superblock"} {
			if !strings.Contains(res.Stdout, want) {
				t.Errorf("assemble output does not say %q", want)
			}
		}
		if devs := n.dmDevices(); len(devs) != 0 {
			t.Errorf("devices created for a refused pool: %v", devs)
		}
		// The pool's other commands refuse too, and write nothing.
		before := n.diskState()
		n.wantFail("volume create other --size 16M --write-cache 8M", "missing")
		n.unchanged(before)

		// Every SSD damaged: no pool is known at all; each device is named.
		n.mustSh(corruptSlot(ssds[0], 0, 100) + " && " + corruptSlot(ssds[0], 1, 100))
		res = n.sh("tidecached assemble")
		t.Logf("assemble:\n%s%s", res.Stdout, res.Stderr)
		if res.ExitCode == 0 || !strings.Contains(res.Stdout, "DAMAGED  "+ssds[0]) || !strings.Contains(res.Stdout, "DAMAGED  "+ssds[1]) {
			t.Errorf("assemble with every SSD damaged: exit %d\n%s", res.ExitCode, res.Stdout)
		}
		if devs := n.dmDevices(); len(devs) != 0 {
			t.Errorf("devices created for a refused pool: %v", devs)
		}
	})
}

// deviceSafetyNode: four HDDs and an SSD for a pool, four spare disks.
var deviceSafetyNode = nodeSpec{
	HDDs: 4, HDDSize: 256 << 20, SSDs: []int64{256 << 20},
	Spares:   []int64{256 << 20, 256 << 20, 256 << 20, 256 << 20},
	MemoryMB: 1024,
}

// TestBadInputDeviceSafety: input that would destroy data is refused with a
// clear error and changes nothing: paths that are not block devices,
// devices open in another process or claimed where the checks cannot see
// it, devices of another pool that is not assembled (its cache may hold
// dirty data) even with --force, and a foreign dm table on a pool's SSD
// at the moment tidecache writes to it.
func TestBadInputDeviceSafety(t *testing.T) {
	besideAnother(t, 70*time.Second)
	n := bootNode(t, deviceSafetyNode)
	ssd := n.ssds()[0]
	hdds := n.hdds()
	sp := n.spares()
	raid := "--assume-clean --raid10 " + strings.Join(hdds, ",")

	// refused runs a tidectl command that must fail with every fragment
	// in its message, and checks that the heads of devs (default: every
	// disk), md and dm are as before.
	refused := func(n *node, args string, want []string, devs ...string) string {
		n.t.Helper()
		before := n.diskState(devs...)
		msg := n.wantFail(args, want...)
		n.t.Logf("tidectl %s:\n%s", args, strings.TrimSpace(msg))
		n.unchanged(before, devs...)
		return msg
	}

	t.Run("not a block device", func(t *testing.T) {
		n := n.on(t)
		n.mustSh("truncate -s 256M /root/ssd.img && ln -sf /root/ssd.img /root/ssd-link && mkdir -p /root/ssd-dir")
		imgSum := "head -c 1M /root/ssd.img | md5sum"
		for _, c := range []struct {
			name, args string
			want       []string
		}{
			{"regular file as --ssd", "pool create tank " + raid + " --ssd /root/ssd.img",
				[]string{"--ssd /root/ssd.img is a regular file, not a block device", "losetup"}},
			{"regular file as --origin", "pool create tank --origin /root/ssd.img --ssd " + ssd,
				[]string{"--origin /root/ssd.img is a regular file, not a block device"}},
			{"regular file as a RAID10 disk", "pool create tank --assume-clean --raid10 " + strings.Join(hdds[:3], ",") + ",/root/ssd.img --ssd " + ssd,
				[]string{"--raid10 /root/ssd.img is a regular file, not a block device"}},
			{"symlink to a regular file", "pool create tank " + raid + " --ssd /root/ssd-link",
				[]string{"--ssd /root/ssd-link (-> /root/ssd.img) is a regular file, not a block device"}},
			{"directory", "pool create tank " + raid + " --ssd /root/ssd-dir",
				[]string{"--ssd /root/ssd-dir is a directory, not a block device"}},
			{"character device, with --force", "pool create tank --force " + raid + " --ssd /dev/null",
				[]string{"--ssd /dev/null is a character device, not a block device"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				n := n.on(t)
				img := n.mustSh(imgSum)
				refused(n, c.args, c.want)
				if got := n.mustSh(imgSum); got != img {
					t.Errorf("the image changed: first MiB %s, was %s", got, img)
				}
				n.noPools()
			})
		}
	})

	// A database or VM writing the raw device: nothing in mountinfo,
	// holders or swaps shows it, only its open file.
	t.Run("open in another process, even with --force", func(t *testing.T) {
		n := n.on(t)
		pid := strings.TrimSpace(n.mustSh("sleep 1000 < " + sp[1] + " > /dev/null 2>&1 & echo $!"))
		refused(n, "pool create tank --force --origin "+sp[0]+" --ssd "+sp[1],
			[]string{sp[1], "in use", "open by process " + pid + " (sleep)"})
		n.mustSh("kill " + pid)
		// A writer holding it read-write through a shell's fd, as origin.
		pid = strings.TrimSpace(n.mustSh("sh -c 'exec 3<>" + sp[1] + "; exec sleep 1000' > /dev/null 2>&1 & echo $!"))
		refused(n, "pool create tank --origin "+sp[1]+" --ssd "+ssd,
			[]string{sp[1], "in use", "open by process " + pid + " (sleep)"})
		n.mustSh("kill " + pid)
		n.noPools()
	})

	// A filesystem mounted in another mount namespace: this node's
	// mountinfo does not list it and no process has the device open; the
	// kernel's exclusive claim is what refuses.
	t.Run("claimed exclusively, mounted in another namespace", func(t *testing.T) {
		n := n.on(t)
		n.mustSh("mkfs.ext4 -q -F " + mkfsOpts + " " + sp[2] + " && mkdir -p /mnt/ns")
		pid := strings.TrimSpace(n.mustSh("unshare -m --propagation private sh -c 'mount " + sp[2] + " /mnt/ns && exec sleep 1000' > /dev/null 2>&1 & echo $!"))
		n.mustSh("for i in $(seq 50); do grep -q ' /mnt/ns ' /proc/" + pid + "/mountinfo && exit 0; sleep 0.1; done; exit 1")
		if out := n.mustSh("grep ' /mnt/ns ' /proc/self/mountinfo || true"); out != "" {
			t.Fatalf("the namespace's mount is visible here: %s", out)
		}
		refused(n, "pool create tank --force --origin "+sp[0]+" --ssd "+sp[2],
			[]string{sp[2], "in use", "opened exclusively by another process"})
		n.mustSh("kill " + pid)
		n.noPools()
	})

	// Pool "old" with a writeback volume holding dirty blocks.
	n.mustTidectl("pool create old " + raid + " --ssd " + ssd)
	var pools []struct {
		UUID string `json:"uuid"`
	}
	if err := json.Unmarshal([]byte(n.mustTidectl("-o json pool show old")), &pools); err != nil || len(pools) != 1 {
		t.Fatalf("pool show old: %v", err)
	}
	oldUUID := pools[0].UUID

	// The pool's SSD claimed by a dm table that is not tidecache's, after
	// any check could run: the write of the new volume's cache metadata
	// opens the SSD exclusively and is refused; nothing is written.
	t.Run("claimed by a foreign dm table at write time", func(t *testing.T) {
		n := n.on(t)
		n.mustSh("dmsetup create intruder --table '0 8192 linear " + ssd + " 400000'")
		gen := n.poolGeneration("old")
		refused(n, "volume create v --size 64M --write-cache 32M",
			[]string{ssd, "in use", "held by", "(intruder)"}, ssd, "/dev/md/tc-old")
		if g := n.poolGeneration("old"); g != gen {
			t.Errorf("pool generation %d after a refused volume create, was %d", g, gen)
		}
		n.wantFail("volume show v", "not found")
		n.mustSh("dmsetup remove intruder")
	})

	n.mustTidectl("volume create v --size 64M --write-cache 32M")
	n.mustSh("dd if=/dev/urandom of=/dev/mapper/tc-v bs=1M count=8 oflag=direct status=none")
	if n.volume("v").WriteCache.DirtyBlocks == 0 {
		t.Fatal("no dirty blocks: the pool would not show what is at stake")
	}
	// Take the pool down as a failed boot would leave it: no dm device, the
	// array stopped. Its SSD holds the only copy of the dirty blocks.
	n.mustSh(removeVolumeDevices("v") + " && mdadm --stop /dev/md/tc-old")

	otherPool := func(dev, pool, uuid, role string) []string {
		return []string{dev, "is the " + role + " of tidecache pool \"" + pool + "\" (uuid " + uuid + ")",
			"--force does not overwrite another pool's device", "not assembled", "--destroy-pool " + pool}
	}
	t.Run("another pool's SSD, with --force", func(t *testing.T) {
		n := n.on(t)
		refused(n, "pool create new --force --origin "+sp[3]+" --ssd "+ssd, otherPool(ssd, "old", oldUUID, "SSD member"))
		n.wantFail("pool show new", "not found")
	})
	t.Run("another pool's RAID10 disk, with --force", func(t *testing.T) {
		n := n.on(t)
		refused(n, "pool create new --force "+raid+" --ssd "+sp[3], otherPool(hdds[0], "old", oldUUID, "RAID10 disk of the origin"))
	})
	t.Run("--destroy-pool naming another pool", func(t *testing.T) {
		n := n.on(t)
		refused(n, "pool create new --force --destroy-pool other --origin "+sp[3]+" --ssd "+ssd, otherPool(ssd, "old", oldUUID, "SSD member"))
	})

	n.mustSh("dd if=" + ssd + " of=/root/ssd-head bs=1M count=2 iflag=direct status=none")
	restore := "dd if=/root/ssd-head of=" + ssd + " bs=1M count=2 conv=notrunc oflag=direct status=none"
	t.Run("another pool's SSD with its newest slot damaged", func(t *testing.T) {
		n := n.on(t)
		n.mustSh(corruptSlot(ssd, 1, 100))
		refused(n, "pool create new --force --origin "+sp[3]+" --ssd "+ssd, otherPool(ssd, "old", oldUUID, "SSD member"))
		n.mustSh(restore)
	})
	// Both slots damaged: the pool is still identified, through the
	// layout its origin carries (the array assembled, as at boot).
	t.Run("another pool's SSD with both slots damaged", func(t *testing.T) {
		n := n.on(t)
		n.mustSh("mdadm --assemble /dev/md/tc-old " + strings.Join(hdds, " "))
		n.mustSh(corruptSlot(ssd, 0, 100) + " && " + corruptSlot(ssd, 1, 100))
		refused(n, "pool create new --force --origin "+sp[3]+" --ssd "+ssd,
			[]string{ssd, "holds a damaged tidecache superblock (read superblock of " + ssd + ": corrupt superblock in slot A",
				"pool \"old\" (uuid " + oldUUID + ") lists it as its SSD member",
				"--force does not overwrite another pool's device", "--destroy-pool old"},
			ssd, sp[3], "/dev/md/tc-old")
		n.mustSh(restore + " && mdadm --stop /dev/md/tc-old")
	})
	// A damaged superblock no layout names: the pool cannot be told, the
	// device's path stands for it.
	t.Run("damaged superblock of an unknown pool", func(t *testing.T) {
		n := n.on(t)
		n.mustSh("dd if=/root/ssd-head of=" + sp[0] + " bs=1M count=2 conv=notrunc oflag=direct status=none && " +
			corruptSlot(sp[0], 0, 100) + " && " + corruptSlot(sp[0], 1, 100))
		refused(n, "pool create new --force --origin "+sp[3]+" --ssd "+sp[0],
			[]string{sp[0], "holds a damaged tidecache superblock of a pool that cannot be identified",
				"--force does not overwrite another pool's device", "--destroy-pool " + sp[0]})
		n.mustSh("dd if=/dev/zero of=" + sp[0] + " bs=1M count=2 oflag=direct status=none")
	})

	t.Run("--destroy-pool that no device belongs to", func(t *testing.T) {
		n := n.on(t)
		refused(n, "pool create new --force --destroy-pool old --origin "+sp[0]+" --ssd "+sp[1],
			[]string{"--destroy-pool old", "none of the devices given belongs to pool old", "nothing was written"})
	})

	t.Run("accepted with --destroy-pool", func(t *testing.T) {
		n := n.on(t)
		res := n.tidectl("pool create new --force --destroy-pool old --origin " + sp[3] + " --ssd " + ssd)
		if res.ExitCode != 0 {
			t.Fatalf("pool create --destroy-pool old: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
		t.Logf("pool create --destroy-pool old, stderr:\n%s", strings.TrimSpace(res.Stderr))
		if !strings.Contains(res.Stderr, "--destroy-pool") || !strings.Contains(res.Stderr, ssd) {
			t.Errorf("no warning naming the destroyed device:\n%s", res.Stderr)
		}
		if g := n.poolGeneration("new"); g != 1 {
			t.Errorf("pool new at generation %d, want 1", g)
		}
	})
}
