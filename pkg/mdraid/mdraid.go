// SPDX-License-Identifier: Apache-2.0

// Package mdraid creates, inspects, assembles and stops Linux md RAID arrays
// through mdadm.
//
// tidecache uses md twice: as the HDD RAID10 origin it can build for a pool,
// and as the RAID1 that mirrors a write cache across two SSDs (one of them
// possibly a peer's, over NVMe/TCP). This is the only package that runs
// mdadm (STYLE.md, rule 3); it does so through command.Runner and parses the
// machine-readable forms of mdadm's output ("--detail --export",
// "--detail --scan"), reading the rest (state, size) from sysfs.
//
// Arrays are identified by their md UUID, which mdadm prints as
// "xxxxxxxx:xxxxxxxx:xxxxxxxx:xxxxxxxx" and this package keeps in that form
// (lower case). Arrays tidecache creates get the device /dev/md/<name>,
// metadata 1.2 and the homehost "any" (see Create), and are assembled
// explicitly by UUID (AssembleByUUID): tidecache does not depend on
// /etc/mdadm/mdadm.conf.
package mdraid

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/command"
)

// ErrDeviceHasData is wrapped by Create's error when a member device carries
// a filesystem, RAID, LVM or partition table signature and Force is unset.
var ErrDeviceHasData = errors.New("device holds data")

// ErrExists is wrapped by Create's error when /dev/md/<name> already exists,
// and by AssembleByUUID's when the name belongs to another array.
var ErrExists = errors.New("md array name already in use")

// pathTimeout bounds the wait for /dev/md/<name> to appear after mdadm
// started an array (udev creates it asynchronously where udev runs).
const pathTimeout = 10 * time.Second

// Manager runs mdadm. The zero value (with a zero Runner) is usable.
type Manager struct {
	Runner command.Runner
	// SysRoot is where sysfs is mounted; "" means "/sys".
	SysRoot string

	// devDir replaces "/dev" in tests.
	devDir string
}

// Array describes an md array as the kernel runs it.
type Array struct {
	// Path is /dev/md/<name> when the array has a name, else the path it
	// was looked up by (/dev/mdN).
	Path string
	// Device is the kernel device, e.g. /dev/md127.
	Device string
	// Name is the array's name without the homehost ("tc-origin").
	Name string
	// UUID is mdadm's "xxxxxxxx:xxxxxxxx:xxxxxxxx:xxxxxxxx", lower case.
	UUID string
	// Level is "10", "1", "0", "5", "linear"... ("raid" dropped).
	Level string
	// RaidDevices is the number of slots (MD_DEVICES).
	RaidDevices int
	// State is the kernel's array_state: "clean", "active",
	// "active-idle", "write-pending", "read-auto", "readonly",
	// "inactive"...
	State string
	// Degraded is the number of slots without a working device.
	Degraded int
	// SyncAction is "idle", "resync", "recover", "check", "repair",
	// "reshape", "frozen", or "" for levels without redundancy.
	SyncAction string
	// Devices are the members holding a slot, in slot order.
	Devices []string
	// Spares are the other members: spares, and failed devices not yet
	// removed.
	Spares []string
	// SizeBytes is the size of the array device.
	SizeBytes uint64
}

// CreateOptions describes a new array.
type CreateOptions struct {
	// Name is the array name: the device becomes /dev/md/<name>. 1 to 27
	// characters from [A-Za-z0-9._-], not starting with '-' or '.'
	// (md keeps 32 bytes for "any:<name>").
	Name string
	// Level is "10" (at least 4 devices, an even number) or "1" (exactly
	// 2 devices).
	Level string
	// Devices are the member devices, all distinct.
	Devices []string
	// Chunk is the RAID10 chunk size, e.g. "512K" (mdadm's syntax: a
	// number of KiB, or a number with K, M or G). Empty: mdadm's default.
	Chunk string
	// Layout is the RAID10 layout: n2 (default), f2, o2... Empty: mdadm's
	// default.
	Layout string
	// AssumeClean skips the initial resync (--assume-clean). Only safe
	// when every member reads as zeroes (new or fully discarded disks):
	// otherwise the copies differ and a later read may return either.
	// It saves hours on large HDDs.
	AssumeClean bool
	// Force creates the array even if a member carries a signature
	// (filesystem, RAID or LVM member, partition table); that content is
	// destroyed. A member that is in use (mounted, held by md or dm) is
	// refused whatever Force says.
	Force bool
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,26}$`)

func validateName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("array name %q: want 1-27 characters from [A-Za-z0-9._-], not starting with '-' or '.'", name)
	}
	return nil
}

var (
	chunkPattern  = regexp.MustCompile(`^[1-9][0-9]*[KMG]?$`)
	layoutPattern = regexp.MustCompile(`^[nfo][1-9][0-9]*$`)
)

func (o CreateOptions) validate() error {
	if err := validateName(o.Name); err != nil {
		return err
	}
	n := len(o.Devices)
	switch o.Level {
	case "10":
		if n < 4 || n%2 != 0 {
			return fmt.Errorf("RAID10 needs an even number of at least 4 devices, got %d", n)
		}
		if o.Chunk != "" && !chunkPattern.MatchString(o.Chunk) {
			return fmt.Errorf("chunk %q: want a size such as 512K", o.Chunk)
		}
		if o.Layout != "" && !layoutPattern.MatchString(o.Layout) {
			return fmt.Errorf("layout %q: want n2, f2, o2 or similar", o.Layout)
		}
	case "1":
		if n != 2 {
			return fmt.Errorf("RAID1 needs exactly 2 devices, got %d", n)
		}
		if o.Chunk != "" || o.Layout != "" {
			return fmt.Errorf("RAID1 takes no chunk or layout")
		}
	default:
		return fmt.Errorf("level %q: want \"10\" or \"1\"", o.Level)
	}
	return nil
}

func (m Manager) dev() string {
	if m.devDir == "" {
		return "/dev"
	}
	return m.devDir
}

// namedPath is /dev/md/<name>.
func (m Manager) namedPath(name string) string {
	return filepath.Join(m.dev(), "md", name)
}

// Create makes a new array from o.Devices and returns it as Detail sees it.
//
// Before mdadm runs, every device is resolved (two paths to the same disk
// are refused), checked to be unused (blockdev.Checker) and, unless Force,
// probed for signatures (blockdev.Prober). mdadm then runs as
//
//	mdadm --create /dev/md/<name> --run --metadata=1.2 --homehost=any
//	      --name=<name> --level=<level> --raid-devices=<n>
//	      [--chunk=<c>] [--layout=<l>] [--assume-clean] <devices>...
//
// --run suppresses mdadm's interactive "continue creating array?" question
// (the checks above replace it). --homehost=any stores "any:<name>" in the
// superblock, so the array is not tied to this host's name: the name stays
// the same if the node is renamed or its disks move to a replacement
// chassis, and tidecache always assembles by UUID anyway.
func (m Manager) Create(ctx context.Context, o CreateOptions) (Array, error) {
	fail := func(err error) (Array, error) {
		return Array{}, fmt.Errorf("create md array %s: %w", o.Name, err)
	}
	if err := o.validate(); err != nil {
		return fail(err)
	}
	target := m.namedPath(o.Name)
	if _, err := os.Stat(target); err == nil {
		return fail(fmt.Errorf("%s exists: %w", target, ErrExists))
	}

	checker := blockdev.Checker{SysRoot: m.SysRoot}
	prober := blockdev.Prober{Runner: m.Runner}
	seen := map[string]string{}
	devices := make([]string, 0, len(o.Devices))
	for _, d := range o.Devices {
		real, err := blockdev.Resolve(d)
		if err != nil {
			return fail(err)
		}
		if prev, dup := seen[real]; dup {
			return fail(fmt.Errorf("%s and %s are the same device (%s)", prev, d, real))
		}
		seen[real] = d
		if err := checker.CheckUnused(ctx, d); err != nil {
			return fail(err)
		}
		if !o.Force {
			sigs, err := prober.Probe(ctx, d)
			if err != nil {
				return fail(err)
			}
			if len(sigs) > 0 {
				return fail(fmt.Errorf("%s holds %s: %w (set Force to overwrite it)", d, describe(sigs), ErrDeviceHasData))
			}
		}
		devices = append(devices, real)
	}

	args := []string{"--create", target, "--run", "--metadata=1.2", "--homehost=any",
		"--name=" + o.Name, "--level=" + o.Level, "--raid-devices=" + strconv.Itoa(len(devices))}
	if o.Chunk != "" {
		args = append(args, "--chunk="+o.Chunk)
	}
	if o.Layout != "" {
		args = append(args, "--layout="+o.Layout)
	}
	if o.AssumeClean {
		args = append(args, "--assume-clean")
	}
	args = append(args, devices...)
	if _, err := m.Runner.Run(ctx, "mdadm", args...); err != nil {
		return fail(err)
	}
	if err := waitForPath(ctx, target); err != nil {
		return fail(err)
	}
	a, err := m.Detail(ctx, target)
	if err != nil {
		return fail(err)
	}
	return a, nil
}

func describe(sigs []blockdev.Signature) string {
	parts := make([]string, 0, len(sigs))
	for _, s := range sigs {
		d := s.Type + " (" + s.Usage
		if s.Label != "" {
			d += ", label " + strconv.Quote(s.Label)
		}
		parts = append(parts, d+")")
	}
	return strings.Join(parts, ", ")
}

// Detail describes the running array at path (/dev/md/<name> or /dev/mdN)
// from "mdadm --detail --export" and sysfs. A path that is not an md array
// gives mdadm's error (a *command.ExitError).
func (m Manager) Detail(ctx context.Context, path string) (Array, error) {
	out, err := m.Runner.Run(ctx, "mdadm", "--detail", "--export", path)
	if err != nil {
		return Array{}, fmt.Errorf("md detail %s: %w", path, err)
	}
	d, err := parseDetailExport(out)
	if err != nil {
		return Array{}, fmt.Errorf("md detail %s: %w", path, err)
	}
	kname, err := blockdev.Name(m.SysRoot, path)
	if err != nil {
		return Array{}, fmt.Errorf("md detail %s: %w", path, err)
	}
	a := Array{
		Path:        path,
		Device:      filepath.Join(m.dev(), kname),
		Name:        d.arrayName(),
		UUID:        d.uuid,
		Level:       d.level,
		RaidDevices: d.raidDevices,
		Devices:     d.devices,
		Spares:      d.spares,
	}
	if d.devName != "" {
		a.Path = m.namedPath(d.devName)
	}
	if err := m.readSysfs(kname, &a); err != nil {
		return Array{}, fmt.Errorf("md detail %s: %w", path, err)
	}
	return a, nil
}

// readSysfs fills State, Degraded, SyncAction and SizeBytes from
// <sys>/class/block/<kname>/{size,md/array_state,md/degraded,md/sync_action}.
// degraded and sync_action exist only for levels with redundancy.
func (m Manager) readSysfs(kname string, a *Array) error {
	sys := m.SysRoot
	if sys == "" {
		sys = "/sys"
	}
	dir := filepath.Join(sys, "class", "block", kname)
	read := func(rel string, optional bool) (string, error) {
		raw, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			if optional && errors.Is(err, fs.ErrNotExist) {
				return "", nil
			}
			return "", err
		}
		return strings.TrimSpace(string(raw)), nil
	}
	var err error
	if a.State, err = read("md/array_state", false); err != nil {
		return err
	}
	if a.SyncAction, err = read("md/sync_action", true); err != nil {
		return err
	}
	degraded, err := read("md/degraded", true)
	if err != nil {
		return err
	}
	if degraded != "" {
		if a.Degraded, err = strconv.Atoi(degraded); err != nil {
			return fmt.Errorf("md/degraded: %w", err)
		}
	}
	size, err := read("size", false)
	if err != nil {
		return err
	}
	sectors, err := strconv.ParseUint(size, 10, 64)
	if err != nil {
		return fmt.Errorf("size: %w", err)
	}
	a.SizeBytes = sectors * 512
	return nil
}

// AssembleByUUID starts the array with the given UUID as /dev/md/<name> and
// returns it. It is idempotent: an array with that UUID that is already
// running is returned as it is (whatever its name). An array that is
// present but inactive (members gathered by udev's incremental assembly,
// not started) is stopped first and then assembled from every member that
// can be found now.
//
// The array is assembled with
//
//	mdadm --assemble /dev/md/<name> --run --config=partitions --uuid=<uuid>
//
// --config=partitions makes mdadm look for members in every device of
// /proc/partitions instead of reading /etc/mdadm/mdadm.conf, so assembly
// does not depend on the host's configuration. --run starts the array even
// if members are missing (degraded): a RAID10 origin that lost a disk, or a
// cache mirror whose peer is gone, must still come up so that its data can
// be reached; Array.Degraded tells the caller.
//
// name may be empty: the name recorded in the array's superblock (found
// with "mdadm --examine --scan") is used then.
func (m Manager) AssembleByUUID(ctx context.Context, uuid, name string) (Array, error) {
	u, err := NormalizeUUID(uuid)
	if err != nil {
		return Array{}, fmt.Errorf("assemble md array: %w", err)
	}
	fail := func(err error) (Array, error) {
		return Array{}, fmt.Errorf("assemble md array %s: %w", u, err)
	}
	if name != "" {
		if err := validateName(name); err != nil {
			return fail(err)
		}
	}

	running, err := m.scan(ctx, "--detail")
	if err != nil {
		return fail(err)
	}
	for _, e := range running {
		if e.uuid != u {
			continue
		}
		a, err := m.Detail(ctx, e.device)
		if err != nil {
			return fail(err)
		}
		if a.State != "inactive" {
			return a, nil
		}
		if err := m.Stop(ctx, e.device); err != nil {
			return fail(fmt.Errorf("stop inactive %s before assembling: %w", e.device, err))
		}
	}
	if name == "" {
		name, err = m.nameOnDisk(ctx, u)
		if err != nil {
			return fail(err)
		}
	}
	for _, e := range running {
		if e.uuid != u && e.shortName() == name {
			return fail(fmt.Errorf("name %s is used by array %s (%s): %w", name, e.uuid, e.device, ErrExists))
		}
	}

	target := m.namedPath(name)
	if _, err := m.Runner.Run(ctx, "mdadm", "--assemble", target, "--run", "--config=partitions", "--uuid="+u); err != nil {
		return fail(err)
	}
	if err := waitForPath(ctx, target); err != nil {
		return fail(err)
	}
	a, err := m.Detail(ctx, target)
	if err != nil {
		return fail(err)
	}
	if a.UUID != u {
		return fail(fmt.Errorf("%s has UUID %s after assembly", target, a.UUID))
	}
	if a.State == "inactive" {
		return fail(fmt.Errorf("%s was assembled but did not start (too few members?)", target))
	}
	return a, nil
}

// nameOnDisk finds the name of array uuid in the superblocks of the
// devices in /proc/partitions.
func (m Manager) nameOnDisk(ctx context.Context, uuid string) (string, error) {
	found, err := m.scan(ctx, "--examine")
	if err != nil {
		return "", err
	}
	for _, e := range found {
		if e.uuid != uuid {
			continue
		}
		name := e.shortName()
		if err := validateName(name); err != nil {
			return "", fmt.Errorf("name on disk: %w; give a name", err)
		}
		return name, nil
	}
	return "", fmt.Errorf("no member device of md array %s found", uuid)
}

// Presence is how much of an md array is on the node.
type Presence struct {
	// Running is set when the array runs (active, possibly degraded).
	Running bool
	// Present counts the member devices found (spares too), Want the
	// devices its superblocks name: its slots and its spares.
	Present, Want int
}

// Complete reports whether the array runs or every one of its devices is
// there to start it with.
func (p Presence) Complete() bool { return p.Running || (p.Want > 0 && p.Present >= p.Want) }

// Presence tells whether the array uuid runs and, if not, how many of its
// member devices are on the node ("mdadm --examine --scan --verbose").
// Boot assembly waits with it for a pool's origin disks before it starts
// the array with --run: a disk that is only late must not leave the array
// degraded.
func (m Manager) Presence(ctx context.Context, uuid string) (Presence, error) {
	u, err := NormalizeUUID(uuid)
	if err != nil {
		return Presence{}, err
	}
	running, err := m.scan(ctx, "--detail")
	if err != nil {
		return Presence{}, fmt.Errorf("md array %s: %w", u, err)
	}
	for _, e := range running {
		if e.uuid == u && !e.inactive {
			return Presence{Running: true}, nil
		}
	}
	found, err := m.scan(ctx, "--examine", "--verbose")
	if err != nil {
		return Presence{}, fmt.Errorf("md array %s: %w", u, err)
	}
	for _, e := range found {
		if e.uuid == u {
			return Presence{Present: len(e.devices), Want: e.numDevices + e.spares}, nil
		}
	}
	return Presence{}, nil
}

// scan runs "mdadm <mode> --scan" (--detail: running arrays; --examine:
// arrays whose members are present) and parses it.
func (m Manager) scan(ctx context.Context, mode string, extra ...string) ([]scanEntry, error) {
	args := append([]string{mode, "--scan"}, extra...)
	if mode == "--examine" {
		args = append(args, "--config=partitions")
	}
	out, err := m.Runner.Run(ctx, "mdadm", args...)
	if err != nil {
		return nil, err
	}
	return parseScan(out)
}

// Stop stops the array at path with "mdadm --stop". A path that does not
// exist (the array is already stopped) is not an error. An array that is
// in use (a dm table or a mount on it) is not stopped: mdadm's error says
// so.
func (m Manager) Stop(ctx context.Context, path string) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if _, err := m.Runner.Run(ctx, "mdadm", "--stop", path); err != nil {
		return fmt.Errorf("stop md array %s: %w", path, err)
	}
	return nil
}

// ZeroSuperblocks erases the md superblock of each device, so a disk of
// a stopped array is a plain disk again (mdadm no longer assembles it,
// blkid no longer reports linux_raid_member). The array must be stopped.
func (m Manager) ZeroSuperblocks(ctx context.Context, devices []string) error {
	if len(devices) == 0 {
		return nil
	}
	args := append([]string{"--zero-superblock"}, devices...)
	if _, err := m.Runner.Run(ctx, "mdadm", args...); err != nil {
		return fmt.Errorf("zero md superblocks of %s: %w", strings.Join(devices, ", "), err)
	}
	return nil
}

// waitForPath waits until path exists: mdadm itself creates /dev/md/<name>
// where udev does not run, udev does it a little later where it runs.
func waitForPath(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, pathTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to appear: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}
