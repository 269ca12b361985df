// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/tests/testbed"
)

// The disks are carved with partition tables, the way an administrator
// shares one RAID10 and one SSD between several caches: every system under
// test sits on the same md RAID10 and the same SSD image, on partitions of
// the same size, so none of them has a faster part of a disk or an extra
// device-mapper layer the others lack. The raw SSD reference is a second
// SSD image with the same qemu settings, measured whole.
//
// RAID10 (md0, near-2, 512 KiB chunks, over the four emulated HDDs):
//
//	p1  bare         the floor: fio and MariaDB straight on the partition
//	p2  tidecache    pool origin: volumes tc-wb and tc-wbr (and the variants)
//	p3  bcache       backing device of bcache0
//	p4  lvm          PV: the origin LVs of lvmcache and lvm writecache
//
// SSD (one image):
//
//	p1  tidecache    pool SSD: the volumes' write and read caches
//	p2  bcache       cache set
//	p3  lvm          PV: the cachevols of lvmcache and lvm writecache
const (
	volumeBytes = 1 << 30   // each system's device
	cacheBytes  = 512 << 20 // each system's SSD cache (tc-wbr: its write tier)
	readTier    = 256 << 20 // tc-wbr's read tier, on top of its write tier

	hddBytes    = 5 << 30 // per emulated HDD (sparse): RAID10 of 10 GiB
	ssdBytes    = 5120 << 20
	rawSSDBytes = volumeBytes + 64<<20

	raidDev = "/dev/md0"
	vgName  = "bench"
)

// The keys of the systems every benchmark compares, by which reports
// find their results: a key mistyped in a lookup finds nothing and makes
// a ratio NaN, where a constant does not compile.
const (
	keySSD           = "SSD"      // the SSD alone, for scale
	keyRAID10        = "RAID10"   // the bare HDD RAID10, the floor
	keyWB            = "tc-wb"    // tidecache, write tier
	keyWBR           = "tc-wbr"   // tidecache, write and read tiers
	keyLVMWritecache = "lvm-wc"   // lvm writecache (dm-writecache)
	keyLVMCache      = "lvmcache" // lvmcache (dm-cache, smq)
	keyBcache        = "bcache"   // bcache writeback
)

// system is one configuration under test: its block device, how it was
// set up (for the report) and how to bring its cache to a known state.
type system struct {
	key   string // short name in tables and charts
	kind  kind
	label string // what it is, one line
	setup string // how a user builds it, for the report
	dev   string
	// fioOnly systems are left out of the database benchmark.
	fioOnly bool
	// base is the system a variant differs from in one setting.
	base string
	// retire, when set, removes what the system put over another one's
	// device once the fio profiles are done with it.
	retire func(ctx context.Context) error
	// attach, when set, brings the device back for the system's database
	// run (after retire); the run calls retire again when it is done.
	attach func(ctx context.Context) error
	// flush writes every dirty block back to the HDDs and returns when
	// none is left; nil when nothing caches writes.
	flush func(ctx context.Context) error
	// readCounters returns cumulative read hits and misses of the cache
	// that serves reads from the SSD; nil when reads are not cached
	// (beyond what a write cache happens to hold).
	readCounters func(ctx context.Context) (hits, misses uint64, err error)
}

// kind is what a system is in the comparison.
type kind int

const (
	reference kind = iota // the SSD alone, the bare RAID10, the SSD behind one dm-linear
	tidecache             // tidecache with its defaults
	peer                  // what users would deploy instead
	variant               // tidecache with a tuning under test
	// legacy is tidecache's stack before the fuaflush target (dm-writecache
	// as the top device, FUA writes acknowledged before they are durable),
	// built by hand: a yardstick for what durable FUA writes cost, never a
	// configuration to run.
	legacy
)

// partitions writes a GPT to dev with one partition per size (MiB; 0: the
// rest) and returns the partition devices. sfdisk asks the kernel to read
// the new table; devtmpfs makes the nodes.
func partitions(ctx context.Context, bed *testbed.Bed, dev string, mib ...int) ([]string, error) {
	var script strings.Builder
	script.WriteString("label: gpt\n")
	for _, m := range mib {
		if m == 0 {
			script.WriteString(",\n")
			continue
		}
		fmt.Fprintf(&script, ",%dMiB\n", m)
	}
	if _, err := bed.Run(ctx, "sh", "-c", `printf '%s' "$1" | sfdisk --quiet --wipe always "$2"`, "sh", script.String(), dev); err != nil {
		return nil, fmt.Errorf("partition %s: %w", dev, err)
	}
	sep := ""
	if strings.HasPrefix(dev, "/dev/md") || strings.HasPrefix(dev, "/dev/nvme") {
		sep = "p"
	}
	var parts []string
	for i := range mib {
		p := fmt.Sprintf("%s%s%d", dev, sep, i+1)
		if err := waitFor(ctx, bed, p); err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	return parts, nil
}

// waitFor waits until path exists in the guest.
func waitFor(ctx context.Context, bed *testbed.Bed, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if _, err := bed.Run(ctx, "test", "-b", path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not appear: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// setUpSystems builds the RAID10, the partitions and every system, and
// returns them in report order: raw SSD, bare RAID10, tidecache (write
// tier, write + read tier), bcache, lvmcache, lvm writecache.
func setUpSystems(ctx context.Context, bed *testbed.Bed, variants bool) ([]*system, error) {
	vols := tidecacheVolumes(variants)
	p := bed.Progress()
	p.Step("building md RAID10 over %s…", strings.Join(bed.HDDs(), " "))
	// The options tidectl pool create --raid10 uses; --assume-clean: the
	// images are new and all zeros, and a resync would compete with every
	// measurement for the throttled disks.
	args := append([]string{"mdadm", "--create", raidDev, "--run", "--metadata=1.2", "--homehost=any",
		"--name=bench", "--level=10", "--raid-devices=4", "--chunk=512K", "--layout=n2", "--assume-clean"}, bed.HDDs()...)
	if _, err := bed.Run(ctx, args...); err != nil {
		return nil, err
	}
	const volMiB, cacheMiB = volumeBytes >> 20, cacheBytes >> 20
	hdd, err := partitions(ctx, bed, raidDev, volMiB, len(vols)*volMiB+64, volMiB+64, 2*volMiB+64)
	if err != nil {
		return nil, err
	}
	ssd, err := partitions(ctx, bed, bed.SSD(), tidecacheSSDMiB(vols), cacheMiB+16, 2*cacheMiB+64)
	if err != nil {
		return nil, err
	}

	raw := &system{key: keySSD, label: "SSD alone (the physical limit)", dev: bed.RawSSD(),
		setup: "the second SSD image, whole, no partition table"}
	bare := &system{key: keyRAID10, label: "bare HDD RAID10 (the floor)", dev: hdd[0],
		setup: fmt.Sprintf("`%s`: a partition of the md RAID10", hdd[0])}
	lin, err := linearOver(ctx, bed, bed.RawSSD(), "ssd-linear")
	if err != nil {
		return nil, err
	}
	// What one device-mapper layer that does nothing but add an offset
	// costs in this VM: the yardstick for every cache's overhead.
	ssdLinear := &system{key: "SSD+linear", label: "SSD alone behind one dm-linear", dev: lin, fioOnly: true,
		setup: "`dmsetup create ssd-linear`: one linear target over the whole SSD-alone image",
		// It holds the SSD-alone image open, and mkfs for the database
		// benchmark refuses a device in use.
		retire: func(ctx context.Context) error {
			_, err := bed.Run(ctx, "dmsetup", "remove", "ssd-linear")
			return err
		},
		attach: func(ctx context.Context) error {
			_, err := linearOver(ctx, bed, bed.RawSSD(), "ssd-linear")
			return err
		}}
	systems := []*system{raw, bare, ssdLinear}

	p.Step("tidecache: pool on %s + %s, %d volumes…", hdd[1], ssd[0], len(vols))
	tc, err := setUpTidecache(ctx, bed, hdd[1], ssd[0], vols)
	if err != nil {
		return nil, err
	}
	systems = append(systems, tc...)

	p.Step("bcache: %s backing, %s cache, writeback…", hdd[2], ssd[1])
	bc, err := setUpBcache(ctx, bed, hdd[2], ssd[1], "128k")
	if err != nil {
		return nil, err
	}
	systems = append(systems, bc)

	p.Step("lvm2: lvmcache (dm-cache, writeback) and lvm writecache on VG %s (%s + %s)…", vgName, hdd[3], ssd[2])
	lv, err := setUpLVM(ctx, bed, hdd[3], ssd[2], volumeBytes, cacheBytes)
	if err != nil {
		return nil, err
	}
	return append(systems, lv...), nil
}

// tidecacheVolume is one tidecache volume the benchmark creates.
type tidecacheVolume struct {
	name, label string
	base        string // for a variant: the default configuration it changes
	kind        kind
	database    bool     // a variant that also runs the database benchmark
	create      []string // tidectl volume create flags after the name
	tune        []string // tidectl volume tune flags after the name, if any
	// oldStack rebuilds the volume's devices by hand as the stack before
	// fuaflush (see oldStackScript).
	oldStack bool
}

// tidecacheVolumes are the volumes on the tidecache partitions: the two
// configurations with tidecache's defaults and, with variants, the
// tunings under test, each differing from its default in one setting.
func tidecacheVolumes(variants bool) []tidecacheVolume {
	size, wc, rc := mib(volumeBytes), mib(cacheBytes), mib(readTier)
	vols := []tidecacheVolume{
		{name: keyWB, kind: tidecache, label: "tidecache write-back (write tier: dm-writecache)",
			create: []string{"--size", size, "--write-cache", wc}},
		{name: keyWBR, kind: tidecache, label: "tidecache write-back + read tier (dm-writecache over dm-cache)",
			create: []string{"--size", size, "--write-cache", wc, "--read-cache", rc}},
	}
	if variants {
		vols = append(vols,
			tidecacheVolume{name: "tc-wbr-64k", base: keyWBR, kind: variant, database: true,
				label:  "tc-wbr with 64 KiB read-tier blocks (the default before this benchmark; now 256 KiB)",
				create: []string{"--size", size, "--write-cache", wc, "--read-cache", rc, "--read-block-size", "64K"}},
			tidecacheVolume{name: "tc-wb-ac100", base: keyWB, kind: variant, label: "tc-wb committing every 100 ms (default: 1 s)",
				create: []string{"--size", size, "--write-cache", wc}, tune: []string{"--autocommit-ms", "100"}},
			tidecacheVolume{name: "tc-wb-old", base: keyWB, kind: legacy, database: true, oldStack: true,
				label:  "tc-wb on the pre-fix stack: dm-writecache on top, no fuaflush (FUA writes not durable; a yardstick only)",
				create: []string{"--size", size, "--write-cache", wc}},
		)
	}
	return vols
}

// tidecacheSSDMiB is the SSD partition the volumes need: their caches
// plus room for metadata slices and the pool's superblocks.
func tidecacheSSDMiB(vols []tidecacheVolume) int {
	mibs := 64
	for _, v := range vols {
		mibs += cacheBytes >> 20
		for _, f := range v.create {
			if f == "--read-cache" {
				mibs += readTier>>20 + 16
			}
		}
	}
	return mibs
}

// setUpTidecache creates the pool and the volumes.
func setUpTidecache(ctx context.Context, bed *testbed.Bed, origin, ssd string, vols []tidecacheVolume) ([]*system, error) {
	if _, err := bed.Run(ctx, "tidectl", "pool", "create", "bench", "--ssd", ssd, "--origin", origin); err != nil {
		return nil, fmt.Errorf("tidecache pool: %w", err)
	}
	var out []*system
	for _, tv := range vols {
		name := tv.name
		if _, err := bed.Run(ctx, append([]string{"tidectl", "volume", "create", name}, tv.create...)...); err != nil {
			return nil, fmt.Errorf("tidecache volume %s: %w", name, err)
		}
		setup := "`tidectl volume create " + name + " " + strings.Join(tv.create, " ") + "`"
		if len(tv.tune) > 0 {
			if _, err := bed.Run(ctx, append([]string{"tidectl", "volume", "tune", name}, tv.tune...)...); err != nil {
				return nil, fmt.Errorf("tidecache volume %s: %w", name, err)
			}
			setup += ", then `tidectl volume tune " + name + " " + strings.Join(tv.tune, " ") + "`"
		}
		if tv.oldStack {
			if err := buildOldStack(ctx, bed, name); err != nil {
				return nil, fmt.Errorf("tidecache volume %s: old stack: %w", name, err)
			}
			setup += ", then rebuilt with dmsetup as the stack before fuaflush: `tc-" + name + "` dm-writecache (the table `tc-" +
				name + "-wtier` had), no fuaflush (see tests/bench/systems.go oldStackScript)"
		}
		v, err := bed.Volume(ctx, name)
		if err != nil {
			return nil, err
		}
		if tv.oldStack && !v.LegacyStack {
			return nil, fmt.Errorf("tidecache volume %s: tidectl does not see the old stack after the rebuild", name)
		}
		if v.State != "active" {
			return nil, fmt.Errorf("tidecache volume %s: state %q after create: %s", name, v.State, v.Error)
		}
		sys := &system{key: name, kind: tv.kind, label: tv.label, dev: v.Device, setup: setup, fioOnly: tv.kind == variant && !tv.database, base: tv.base,
			flush: func(ctx context.Context) error {
				_, err := bed.Flush(ctx, name)
				return err
			}}
		if v.ReadCache != nil {
			sys.readCounters = func(ctx context.Context) (uint64, uint64, error) {
				v, err := bed.Volume(ctx, name)
				if err != nil {
					return 0, 0, err
				}
				if v.ReadCache == nil {
					return 0, 0, fmt.Errorf("volume %s reports no read tier", name)
				}
				return v.ReadCache.ReadHits, v.ReadCache.ReadMisses, nil
			}
		}
		out = append(out, sys)
	}
	return out, nil
}

// oldStackScript turns volume $1's devices into the stack tidecache built
// before the fuaflush target, as tests/vm TestLegacyStackMigration does:
// tc-<vol> becomes the dm-writecache that tc-<vol>-wtier was (same table:
// cache slice, origin, options), and tc-<vol>-wtier goes. The write tier is
// flushed first, so the linear table that bridges the swap maps clean
// blocks only. Two dm-writecache targets must never run on one cache slice:
// the old one is removed before the new one is loaded.
const oldStackScript = `set -e
top=tc-$1
sz=$(blockdev --getsz /dev/mapper/$top)
wc=$(dmsetup table $top-wtier | cut -d' ' -f3-)
set -- $wc
[ "$1" = writecache ] || { echo "$top-wtier is not a writecache: $wc" >&2; exit 1; }
lower=$3
dmsetup suspend $top
dmsetup load $top --table "0 $sz linear $lower 0"
dmsetup resume $top
dmsetup remove $top-wtier
dmsetup suspend $top
dmsetup load $top --table "0 $sz $wc"
dmsetup resume $top
dmsetup table $top | grep -q ' writecache '`

// buildOldStack flushes volume name and rebuilds its devices as the stack
// before fuaflush (oldStackScript). Nothing may run `tidecached assemble`,
// `tidectl volume set-mode` or `volume repair` on it afterwards: they move
// it to the current stack. `volume show`, `flush` and `tune` leave it be.
func buildOldStack(ctx context.Context, bed *testbed.Bed, name string) error {
	if _, err := bed.Flush(ctx, name); err != nil {
		return err
	}
	_, err := bed.Run(ctx, "sh", "-c", oldStackScript, "sh", name)
	return err
}

// linearOver creates a dm-linear device spanning dev and returns its path.
func linearOver(ctx context.Context, bed *testbed.Bed, dev, name string) (string, error) {
	out, err := bed.Run(ctx, "blockdev", "--getsz", dev)
	if err != nil {
		return "", err
	}
	table := fmt.Sprintf("0 %s linear %s 0", strings.TrimSpace(out), dev)
	if _, err := bed.Run(ctx, "dmsetup", "create", name, "--table", table); err != nil {
		return "", err
	}
	return "/dev/mapper/" + name, nil
}

func mib(n int64) string { return strconv.FormatInt(n>>20, 10) + "M" }

// setUpBcache makes a bcache device the way bcache-tools documents it:
// make-bcache -B backing -C cache (attached at registration), writeback.
// The bucket is smaller than the 512 KiB default (128k for a 512 MiB
// cache) because bcache refuses a cache of fewer than about a thousand
// buckets; every other setting keeps its default, including the 4 MiB
// sequential cutoff (long sequential streams go to the HDDs) and the
// congestion thresholds.
func setUpBcache(ctx context.Context, bed *testbed.Bed, backing, cache, bucket string) (*system, error) {
	cmds := [][]string{
		{"modprobe", "bcache"},
		{"make-bcache", "--wipe-bcache", "--writeback", "--bucket", bucket, "-B", backing, "-C", cache},
		{"sh", "-c", `echo "$1" > /sys/fs/bcache/register`, "sh", backing},
		{"sh", "-c", `echo "$1" > /sys/fs/bcache/register`, "sh", cache},
	}
	for _, argv := range cmds {
		if _, err := bed.Run(ctx, argv...); err != nil {
			return nil, fmt.Errorf("bcache: %w", err)
		}
	}
	const dev, sysfs = "/dev/bcache0", "/sys/block/bcache0/bcache/"
	if err := waitFor(ctx, bed, dev); err != nil {
		return nil, err
	}
	state, err := bed.Run(ctx, "cat", sysfs+"state", sysfs+"cache_mode")
	if err != nil {
		return nil, err
	}
	if strings.Contains(state, "no cache") || !strings.Contains(state, "[writeback]") {
		return nil, fmt.Errorf("bcache: cache not attached in writeback mode: %q", state)
	}
	return &system{
		key: keyBcache, kind: peer, label: "bcache writeback (bcache-tools defaults)", dev: dev,
		setup: fmt.Sprintf("`make-bcache --writeback --bucket %s -B %s -C %s`", bucket, backing, cache),
		flush: func(ctx context.Context) error { return flushBcache(ctx, bed, sysfs) },
		readCounters: func(ctx context.Context) (uint64, uint64, error) {
			out, err := bed.Run(ctx, "cat", sysfs+"stats_total/cache_hits", sysfs+"stats_total/cache_misses")
			if err != nil {
				return 0, 0, err
			}
			f := strings.Fields(out)
			if len(f) != 2 {
				return 0, 0, fmt.Errorf("bcache stats: %q", out)
			}
			h, err1 := strconv.ParseUint(f[0], 10, 64)
			m, err2 := strconv.ParseUint(f[1], 10, 64)
			if err1 != nil || err2 != nil {
				return 0, 0, fmt.Errorf("bcache stats: %q", out)
			}
			return h, m, nil
		},
	}, nil
}

// flushBcache writes every dirty block back: writeback_percent 0 (no
// dirty data is left as a target) and writeback_delay 0 (bcache otherwise
// waits 30 s after the first write to a clean cache), waits for dirty_data
// to reach 0 and restores the defaults, 10 % and 30 s.
func flushBcache(ctx context.Context, bed *testbed.Bed, sysfs string) error {
	set := func(knob, v string) error {
		_, err := bed.Run(ctx, "sh", "-c", `echo "$1" > "$2"`, "sh", v, sysfs+knob)
		return err
	}
	if err := set("writeback_delay", "0"); err != nil {
		return err
	}
	if err := set("writeback_percent", "0"); err != nil {
		return err
	}
	err := waitClean(ctx, bed, "bcache", func(ctx context.Context) (bool, string, error) {
		out, err := bed.Run(ctx, "cat", sysfs+"dirty_data")
		out = strings.TrimSpace(out)
		return out == "0.0k" || out == "0", out + " dirty", err
	})
	for knob, v := range map[string]string{"writeback_percent": "10", "writeback_delay": "30"} {
		if rerr := set(knob, v); err == nil {
			err = rerr
		}
	}
	return err
}

// waitClean polls clean every second until it reports true, printing its
// status every 10 s, for at most 10 minutes.
func waitClean(ctx context.Context, bed *testbed.Bed, what string, clean func(context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	start := time.Now()
	last := start
	for {
		ok, status, err := clean(ctx)
		if err != nil {
			return fmt.Errorf("flush %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Since(last) >= 10*time.Second {
			bed.Progress().Step("  flushing %s: %s after %v", what, status, time.Since(start).Round(time.Second))
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("flush %s: still %s: %w", what, status, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// lvmConfig makes lvm2 work without udev and lvmetad in the VM: it finds
// devices by scanning /dev and creates the device nodes itself.
const lvmConfig = `devices { obtain_device_list_from_udev = 0 }
activation { udev_sync = 0 udev_rules = 0 monitoring = 0 }
`

// setUpLVM makes the two lvm2 caches as lvmcache(7) and lvm's writecache
// documentation show them: an origin LV on the HDD PV, a cachevol on the
// SSD PV, lvconvert --type cache (dm-cache, smq, --cachemode writeback)
// or --type writecache, everything else at lvm2's defaults. Each origin LV
// is volume bytes, each cachevol cache bytes.
func setUpLVM(ctx context.Context, bed *testbed.Bed, hddPV, ssdPV string, volume, cache int64) ([]*system, error) {
	if _, err := bed.Run(ctx, "sh", "-c", `mkdir -p /run/bench-lvm /run/lock/lvm && printf '%s' "$1" > /run/bench-lvm/lvm.conf`, "sh", lvmConfig); err != nil {
		return nil, err
	}
	lvm := func(args ...string) error {
		_, err := bed.Run(ctx, append([]string{"env", "LVM_SYSTEM_DIR=/run/bench-lvm", "LVM_SUPPRESS_FD_WARNINGS=1"}, args...)...)
		return err
	}
	size, cacheSize := mib(volume), mib(cache)
	steps := [][]string{
		{"pvcreate", "-y", hddPV, ssdPV},
		{"vgcreate", vgName, hddPV, ssdPV},
		{"lvcreate", "-y", "-n", "lvmcache", "-L", size, vgName, hddPV},
		{"lvcreate", "-y", "-n", "lvmcache_fast", "-L", cacheSize, vgName, ssdPV},
		{"lvchange", "-an", vgName + "/lvmcache_fast"},
		{"lvconvert", "-y", "--type", "cache", "--cachevol", "lvmcache_fast", "--cachemode", "writeback", vgName + "/lvmcache"},
		{"lvcreate", "-y", "-n", "lvmwc", "-L", size, vgName, hddPV},
		{"lvcreate", "-y", "-n", "lvmwc_fast", "-L", cacheSize, vgName, ssdPV},
		{"lvchange", "-an", vgName + "/lvmwc_fast"},
		{"lvconvert", "-y", "--type", "writecache", "--cachevol", "lvmwc_fast", vgName + "/lvmwc"},
	}
	for _, s := range steps {
		if err := lvm(s...); err != nil {
			return nil, fmt.Errorf("lvm: %w", err)
		}
	}
	cacheDM, wcDM := "/dev/mapper/"+vgName+"-lvmcache", "/dev/mapper/"+vgName+"-lvmwc"
	for _, d := range []string{cacheDM, wcDM} {
		if err := waitFor(ctx, bed, d); err != nil {
			return nil, err
		}
	}
	cacheStatus := func(ctx context.Context) (dm.CacheStatus, error) {
		out, err := bed.Run(ctx, "dmsetup", "status", vgName+"-lvmcache")
		if err != nil {
			return dm.CacheStatus{}, err
		}
		params, err := targetParams(out, "cache")
		if err != nil {
			return dm.CacheStatus{}, err
		}
		return dm.ParseCacheStatus(params, dm.Version{})
	}
	lvmcache := &system{
		key: keyLVMCache, kind: peer, label: "lvmcache writeback (dm-cache, smq, lvm2 defaults)", dev: cacheDM,
		setup: fmt.Sprintf("`lvconvert --type cache --cachevol lvmcache_fast --cachemode writeback %s/lvmcache` (%s cachevol)", vgName, cacheSize),
		flush: func(ctx context.Context) error {
			// smq writes dirty blocks back when the device is idle.
			return waitClean(ctx, bed, "lvmcache", func(ctx context.Context) (bool, string, error) {
				st, err := cacheStatus(ctx)
				return st.Dirty == 0, fmt.Sprintf("%d dirty blocks", st.Dirty), err
			})
		},
		readCounters: func(ctx context.Context) (uint64, uint64, error) {
			st, err := cacheStatus(ctx)
			return st.ReadHits, st.ReadMisses, err
		},
	}
	lvmwc := &system{
		key: keyLVMWritecache, kind: peer, label: "lvm writecache (dm-writecache, lvm2 defaults)", dev: wcDM,
		setup: fmt.Sprintf("`lvconvert --type writecache --cachevol lvmwc_fast %s/lvmwc` (%s cachevol)", vgName, cacheSize),
		flush: func(ctx context.Context) error {
			// The flush message returns when every dirty block is written back.
			_, err := bed.Run(ctx, "dmsetup", "message", vgName+"-lvmwc", "0", "flush")
			return err
		},
	}
	return []*system{lvmcache, lvmwc}, nil
}

// targetParams returns the status parameters of a single-target `dmsetup
// status` line ("0 2097152 cache <params>"), checking the target type.
func targetParams(line, target string) (string, error) {
	f := strings.SplitN(strings.TrimSpace(line), " ", 4)
	if len(f) < 4 || f[2] != target {
		return "", fmt.Errorf("dmsetup status: want one %s target, got %q", target, line)
	}
	return f[3], nil
}
