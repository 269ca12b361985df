// SPDX-License-Identifier: Apache-2.0

package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// HDD is how one spindle is emulated: a fixed service time per I/O
// (dm-delay, in the guest) and an IOPS ceiling (qemu throttling, on the
// host). See the package documentation for why it takes both.
type HDD struct {
	Model   string        // what the numbers stand for, for reports
	Latency time.Duration // dm-delay per read and write; whole milliseconds
	IOPS    int64         // qemu throttling.iops-total per disk
	// WriteCache leaves the drive's volatile write cache on: the guest
	// kernel then sends it flushes, and dm-delay delays each flush by
	// Latency like a write. Off (the default), the disk is write-through
	// (hdparm -W0, or a RAID controller with a battery-backed cache): every
	// write pays the mechanics and the kernel sends no flushes at all.
	WriteCache bool
	// QueueDepth is how many commands the drive accepts at once: the
	// virtio disk gets one request queue of that many entries
	// (harness.Disk.QueueSize), so the guest keeps at most that many
	// requests in flight on it, as a SATA drive's NCQ takes 32. A power
	// of two from 4 to 1024 (qemu's rule); 0 means 32.
	QueueDepth int
	// Scheduler is the guest's I/O scheduler on the raw disk (sysfs
	// queue/scheduler): SchedDeadline, as Linux runs SATA disks under md,
	// or SchedNone, as behind a hardware RAID controller, which reorders
	// in its own queue. "" means SchedDeadline.
	Scheduler string
}

// The I/O schedulers an HDD model may run under (HDD.Scheduler).
const (
	SchedDeadline = "mq-deadline"
	SchedNone     = "none"
)

// ncqDepth is a SATA drive's command queue (NCQ): 32 tags.
const ncqDepth = 32

// Nearline7200 is the spindle the demo and the benchmark emulate: a
// 7,200 rpm nearline SATA/SAS drive, the cheap and big disk that database
// servers put in RAID10 and that tidecache exists to hide. Half a rotation
// at 7,200 rpm is 4.2 ms; a short seek within the few percent of the platter
// a database's hot extent covers adds about 4 ms: 8 ms per random I/O, about
// 120 IOPS at queue depth 1. With a deep queue, command reordering (NCQ)
// lets such a drive reach roughly 150-200 random IOPS: the cap is 150, the
// conservative end. Its write cache is off, as database servers run HDDs
// (a volatile HDD cache is either lied about or flushed on every commit).
// A 10k rpm drive would be about 3 ms + 3 ms and 200-250 IOPS: smaller
// speed-ups, the same picture.
//
// It queues as such a drive does on a server: 32 commands at once (NCQ),
// behind Linux's mq-deadline scheduler, which md's member disks get.
func Nearline7200() HDD {
	return HDD{Model: "7,200 rpm nearline SATA/SAS", Latency: 8 * time.Millisecond, IOPS: 150,
		QueueDepth: ncqDepth, Scheduler: SchedDeadline}
}

// withDefaults fills in the queue depth and the scheduler and checks the
// model.
func (h HDD) withDefaults() (HDD, error) {
	if h.QueueDepth == 0 {
		h.QueueDepth = ncqDepth
	}
	if h.Scheduler == "" {
		h.Scheduler = SchedDeadline
	}
	if h.Latency%time.Millisecond != 0 || h.Latency <= 0 || h.IOPS < 0 {
		return h, fmt.Errorf("testbed: HDD latency %v: want a positive number of whole milliseconds (dm-delay's unit)", h.Latency)
	}
	if q := h.QueueDepth; q < 4 || q > 1024 || q&(q-1) != 0 {
		return h, fmt.Errorf("testbed: HDD queue depth %d: want a power of two from 4 to 1024 (a virtio queue's size)", q)
	}
	if h.Scheduler != SchedDeadline && h.Scheduler != SchedNone {
		return h, fmt.Errorf("testbed: HDD scheduler %q: want %s or %s", h.Scheduler, SchedDeadline, SchedNone)
	}
	return h, nil
}

// String describes the model for reports.
func (h HDD) String() string {
	cache := "write cache off (write-through: the kernel sends it no flushes)"
	if h.WriteCache {
		cache = "write cache on (flushes delayed " + h.Latency.String() + " too)"
	}
	return fmt.Sprintf("%s, %s: dm-delay %v per read and write, qemu throttling.iops-total=%d per disk, "+
		"one queue of %d commands, scheduler %s",
		h.Model, cache, h.Latency, h.IOPS, h.QueueDepth, h.Scheduler)
}

// guestCPUs is the VM's CPU count: the machines this runs on have two
// cores, and a guest with more vCPUs than host cores only adds contention.
const guestCPUs = 2

// Config describes a test bed. Zero sizes take the defaults below.
type Config struct {
	// Name names the VM and the directory <harness.CacheDir()>/<Name> holding
	// the images, the binaries and the VM's logs.
	Name    string
	HDD     HDD
	HDDs    int   // disks in the RAID10, default 4
	HDDSize int64 // bytes per disk (sparse image), default 1 GiB
	SSDSize int64 // bytes of the pool's SSD, default 512 MiB
	// RawSSDSize, when not 0, adds a second SSD image of the same kind and
	// the same qemu settings that no pool uses: the reference the benchmark
	// measures the cached volumes against.
	RawSSDSize int64
	// SSDWriteCache makes the SSDs write-back devices (a consumer SSD: the
	// guest flushes them and qemu turns each flush into an fdatasync of
	// the image on the host). Off (the default), they are write-through,
	// like the data-centre NVMe drives with power-loss protection that
	// database servers carry: FUA and flushes cost nothing extra.
	SSDWriteCache bool
	MemoryMiB     int // default 1536
	// Network, when set, joins the VM to other VMs (the benchmark's
	// replica peer) as harness.Config.Network does.
	Network  *harness.Network
	Keep     bool // keep the disk images after Close
	Progress *Progress
}

func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		return c, errors.New("testbed: Config.Name is empty")
	}
	if c.HDD == (HDD{}) {
		c.HDD = Nearline7200()
	}
	var err error
	if c.HDD, err = c.HDD.withDefaults(); err != nil {
		return c, err
	}
	if c.HDDs == 0 {
		c.HDDs = 4
	}
	if c.HDDs < 4 || c.HDDs%2 != 0 {
		return c, fmt.Errorf("testbed: %d HDDs: RAID10 here wants an even number, at least 4", c.HDDs)
	}
	if c.HDDSize == 0 {
		c.HDDSize = 1 << 30
	}
	if c.SSDSize == 0 {
		c.SSDSize = 512 << 20
	}
	if c.MemoryMiB == 0 {
		c.MemoryMiB = 1536
	}
	if c.Progress == nil {
		c.Progress = NewProgress(nil)
	}
	return c, nil
}

// Bed is a booted test VM with its emulated disks. Its methods may be
// called from one goroutine at a time.
type Bed struct {
	cfg    Config
	dir    string // <cache>/<Name>
	bin    string // guest-visible directory with tidectl and tidecached
	images []string
	vm     *harness.VM
	kernel string
	lock   *os.File // flock on <dir>/.lock while the bed runs
}

// Start builds tidectl and tidecached, makes fresh disk images, boots the
// VM and creates the emulated HDDs (/dev/mapper/hdd0...) in it. The VM
// lives until Close or until ctx ends. On error nothing is left running.
func Start(ctx context.Context, cfg Config) (*Bed, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := cfg.Progress
	if err := harness.Available(); err != nil {
		return nil, err
	}
	cache, err := harness.CacheDir()
	if err != nil {
		return nil, err
	}
	b := &Bed{cfg: cfg, dir: filepath.Join(cache, cfg.Name)}
	b.bin = filepath.Join(b.dir, "bin")
	if err := b.lockDir(); err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			b.unlockDir()
		}
	}()

	p.Step("building tidectl and tidecached…")
	if err := harness.BuildBinaries(ctx, b.bin, "./cmd/tidectl", "./cmd/tidecached"); err != nil {
		return nil, fmt.Errorf("testbed: build: %w", err)
	}

	p.Step("making disk images in %s…", b.dir)
	disks, err := b.makeImages()
	if err != nil {
		return nil, err
	}

	p.Step("booting VM (qemu TCG, %d CPUs, %d MiB)…", guestCPUs, cfg.MemoryMiB)
	v, err := harness.Boot(ctx, harness.Config{
		Name:      cfg.Name,
		Disks:     disks,
		CPUs:      guestCPUs,
		MemoryMiB: cfg.MemoryMiB,
		Network:   cfg.Network,
		Dir:       filepath.Join(b.dir, "vm"),
	})
	if err != nil {
		b.removeImages()
		return nil, fmt.Errorf("testbed: boot: %w", err)
	}
	b.vm = v
	p.Step("VM up in %v", v.BootDuration().Round(100*time.Millisecond))

	kernel, err := b.Run(ctx, "uname", "-r")
	if err != nil {
		b.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	b.kernel = strings.TrimSpace(kernel)

	if err := b.setWriteCaches(ctx); err != nil {
		b.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := b.setSchedulers(ctx); err != nil {
		b.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	p.Step("creating %d emulated HDDs (dm-delay %v + %d IOPS cap, %d commands queued, %s each)…",
		cfg.HDDs, cfg.HDD.Latency, cfg.HDD.IOPS, cfg.HDD.QueueDepth, cfg.HDD.Scheduler)
	if err := b.makeHDDs(ctx); err != nil {
		b.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	started = true
	return b, nil
}

// lockDir takes an exclusive lock on the bed's directory, so that a second
// run with the same Name (two `make demo` at once) fails at once instead
// of deleting the images under the first one's VM.
func (b *Bed) lockDir() error {
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(b.dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return fmt.Errorf("testbed: %s is in use by another run (%w)", b.dir, err)
	}
	b.lock = f
	return nil
}

func (b *Bed) unlockDir() {
	if b.lock != nil {
		b.lock.Close() // closing the file releases the lock
		b.lock = nil
	}
}

// makeImages writes fresh images: sparse HDDs, zero-filled SSDs (see the
// package documentation), and returns them in guest device order.
func (b *Bed) makeImages() ([]harness.Disk, error) {
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	var disks []harness.Disk
	for i := 0; i < b.cfg.HDDs; i++ {
		disks = append(disks, harness.Disk{Path: filepath.Join(b.dir, fmt.Sprintf("hdd%d.img", i)), Size: b.cfg.HDDSize,
			IOPSLimit: b.cfg.HDD.IOPS, Queues: 1, QueueSize: b.cfg.HDD.QueueDepth})
	}
	disks = append(disks, harness.Disk{Path: filepath.Join(b.dir, "ssd.img"), Size: b.cfg.SSDSize})
	if b.cfg.RawSSDSize > 0 {
		disks = append(disks, harness.Disk{Path: filepath.Join(b.dir, "rawssd.img"), Size: b.cfg.RawSSDSize})
	}
	for i, d := range disks {
		b.images = append(b.images, d.Path)
		if err := os.Remove(d.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("testbed: remove old image: %w", err)
		}
		if i >= b.cfg.HDDs {
			if err := writeZeros(d.Path, d.Size); err != nil {
				b.removeImages()
				return nil, fmt.Errorf("testbed: %w", err)
			}
		}
	}
	return disks, nil
}

// writeZeros creates path as a fully allocated file of size bytes.
func writeZeros(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		left -= n
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

func (b *Bed) removeImages() {
	if b.cfg.Keep {
		return
	}
	for _, p := range b.images {
		os.Remove(p)
	}
}

// setWriteCaches tells the guest kernel which disks have a volatile write
// cache (sysfs queue/write_cache). The kernel sends flushes and FUA only to
// write-back devices, and device-mapper devices inherit the setting from
// the devices below when their table is loaded, so this runs before any
// dm device is made.
func (b *Bed) setWriteCaches(ctx context.Context) error {
	mode := func(writeBack bool) string {
		if writeBack {
			return "write back"
		}
		return "write through"
	}
	set := map[string]bool{b.SSD(): b.cfg.SSDWriteCache}
	for _, d := range b.rawHDDs() {
		set[d] = b.cfg.HDD.WriteCache
	}
	if d := b.RawSSD(); d != "" {
		set[d] = b.cfg.SSDWriteCache
	}
	for dev, wb := range set {
		path := "/sys/block/" + filepath.Base(dev) + "/queue/write_cache"
		if _, err := b.Run(ctx, "sh", "-c", `echo "$1" > "$2"`, "sh", mode(wb), path); err != nil {
			return fmt.Errorf("testbed: set %s write cache: %w", dev, err)
		}
	}
	return nil
}

// setSchedulers sets the HDD model's I/O scheduler on every raw HDD and
// checks that the guest runs it.
func (b *Bed) setSchedulers(ctx context.Context) error {
	for _, dev := range b.rawHDDs() {
		path := "/sys/block/" + filepath.Base(dev) + "/queue/scheduler"
		out, err := b.Run(ctx, "sh", "-c", `echo "$1" > "$2" && cat "$2"`, "sh", b.cfg.HDD.Scheduler, path)
		if err != nil {
			return fmt.Errorf("testbed: set %s scheduler: %w", dev, err)
		}
		if !strings.Contains(out, "["+b.cfg.HDD.Scheduler+"]") {
			return fmt.Errorf("testbed: %s runs scheduler %q, want %s", dev, strings.TrimSpace(out), b.cfg.HDD.Scheduler)
		}
	}
	return nil
}

// QueueInfo is what the guest kernel says about a disk's request queue.
type QueueInfo struct {
	Scheduler   string // the one in use
	HWQueues    int    // blk-mq hardware queues
	Tags        int    // requests the driver keeps in flight per queue
	NrRequests  int    // requests the scheduler (or the driver, without one) holds
	MaxSegments int    // pages one request may carry
	MaxKiB      int    // the largest request, KiB (max_sectors_kb)
}

// HDDQueue reads the queue of the first raw HDD (they are all alike).
func (b *Bed) HDDQueue(ctx context.Context) (QueueInfo, error) {
	q := "/sys/block/" + filepath.Base(b.rawHDDs()[0])
	out, err := b.Run(ctx, "sh", "-c", `cd "$1" && cat queue/scheduler && ls mq | wc -l && cat mq/0/nr_tags queue/nr_requests queue/max_segments queue/max_sectors_kb`, "sh", q)
	if err != nil {
		return QueueInfo{}, err
	}
	return parseQueueInfo(out)
}

// parseQueueInfo reads HDDQueue's output: the scheduler line
// ("[mq-deadline] none"), then hardware queues, tags, nr_requests,
// max_segments and max_sectors_kb, one number per line.
func parseQueueInfo(out string) (QueueInfo, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 {
		return QueueInfo{}, fmt.Errorf("testbed: queue info %q: want 6 lines", out)
	}
	var q QueueInfo
	if _, sched, ok := strings.Cut(lines[0], "["); ok {
		q.Scheduler, _, _ = strings.Cut(sched, "]")
	}
	if q.Scheduler == "" {
		return QueueInfo{}, fmt.Errorf("testbed: queue info: no scheduler in use in %q", lines[0])
	}
	for i, p := range []*int{&q.HWQueues, &q.Tags, &q.NrRequests, &q.MaxSegments, &q.MaxKiB} {
		n, err := strconv.Atoi(strings.TrimSpace(lines[i+1]))
		if err != nil {
			return QueueInfo{}, fmt.Errorf("testbed: queue info line %d %q: %w", i+2, lines[i+1], err)
		}
		*p = n
	}
	return q, nil
}

// makeHDDs puts a dm-delay target over every raw HDD.
func (b *Bed) makeHDDs(ctx context.Context) error {
	ms := b.cfg.HDD.Latency.Milliseconds()
	for i, dev := range b.rawHDDs() {
		out, err := b.Run(ctx, "blockdev", "--getsz", dev)
		if err != nil {
			return err
		}
		sectors, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
		if err != nil {
			return fmt.Errorf("testbed: size of %s: %q: %w", dev, out, err)
		}
		// delay <dev> <offset> <ms>: the same delay for reads, writes and
		// flushes (flushes only arrive when the disk is write-back).
		table := fmt.Sprintf("0 %d delay %s 0 %d", sectors, dev, ms)
		if _, err := b.Run(ctx, "dmsetup", "create", fmt.Sprintf("hdd%d", i), "--table", table); err != nil {
			return err
		}
	}
	return nil
}

// Close powers the VM off and removes the disk images unless Config.Keep.
// The binaries and the VM's logs stay in Dir.
func (b *Bed) Close(ctx context.Context) error {
	var err error
	if b.vm != nil {
		err = b.vm.Shutdown(ctx)
	}
	b.removeImages()
	b.unlockDir()
	return err
}

// Finish is Close for a deferred call at the end of a run: it shuts the VM
// down with a fresh one-minute deadline even when ctx was canceled
// (Ctrl-C), tells the user where the VM's logs are when the run failed
// (*err set), and reports a failed shutdown through *err if nothing else
// failed.
func (b *Bed) Finish(ctx context.Context, err *error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if *err != nil {
		b.cfg.Progress.Step("the VM's console log and qemu output are in %s", b.vm.BootDir())
	}
	if cerr := b.Close(cctx); cerr != nil && *err == nil {
		*err = fmt.Errorf("shut down the VM: %w", cerr)
	}
}

// Dir is the bed's directory on the host.
func (b *Bed) Dir() string { return b.dir }

// Kernel is the guest's kernel release (uname -r).
func (b *Bed) Kernel() string { return b.kernel }

// Config returns the bed's configuration with defaults filled in.
func (b *Bed) Config() Config { return b.cfg }

// VM returns the running VM, for what the helpers here do not cover.
func (b *Bed) VM() *harness.VM { return b.vm }

// Progress returns the progress printer the bed reports to.
func (b *Bed) Progress() *Progress { return b.cfg.Progress }

// rawHDDs are the guest devices of the HDD images: /dev/vda...
func (b *Bed) rawHDDs() []string {
	var out []string
	for i := 0; i < b.cfg.HDDs; i++ {
		out = append(out, guestDisk(i))
	}
	return out
}

// HDDs are the emulated HDDs: dm-delay over the HDD images.
func (b *Bed) HDDs() []string {
	var out []string
	for i := 0; i < b.cfg.HDDs; i++ {
		out = append(out, fmt.Sprintf("/dev/mapper/hdd%d", i))
	}
	return out
}

// SSD is the guest device of the pool's SSD.
func (b *Bed) SSD() string { return guestDisk(b.cfg.HDDs) }

// RawSSD is the guest device of the reference SSD ("" without one).
func (b *Bed) RawSSD() string {
	if b.cfg.RawSSDSize == 0 {
		return ""
	}
	return guestDisk(b.cfg.HDDs + 1)
}

// guestDisk is the i-th virtio disk: /dev/vda, /dev/vdb...
func guestDisk(i int) string { return "/dev/" + harness.GuestDiskName(i) }

// Run runs argv in the guest (tidectl and tidecached by their bare names)
// and returns its stdout. A command that fails is an error carrying its
// exit code and stderr.
func (b *Bed) Run(ctx context.Context, argv ...string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("testbed: Run: no command")
	}
	argv = append([]string(nil), argv...)
	if argv[0] == "tidectl" || argv[0] == "tidecached" {
		argv[0] = filepath.Join(b.bin, argv[0])
	}
	res, err := b.vm.Exec(ctx, harness.Cmd{Argv: argv})
	if err != nil {
		return res.Stdout, fmt.Errorf("testbed: %w", err)
	}
	if res.ExitCode != 0 {
		return res.Stdout, &CommandError{Argv: argv, ExitCode: res.ExitCode, Stderr: res.Stderr}
	}
	return res.Stdout, nil
}

// CommandError is a guest command that ran and failed.
type CommandError struct {
	Argv     []string
	ExitCode int
	Stderr   string
}

func (e *CommandError) Error() string {
	msg := fmt.Sprintf("%s: exit code %d", strings.Join(e.Argv, " "), e.ExitCode)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + s
	}
	return msg
}

// Progress prints timestamped progress lines ("[ 12s] booting VM…"), so
// that a user watching a run sees what it is doing and how long each step
// took. A nil writer discards them.
type Progress struct {
	out   io.Writer
	start time.Time
}

// NewProgress returns a Progress writing to w (nil: nowhere), counting
// from now.
func NewProgress(w io.Writer) *Progress {
	return &Progress{out: w, start: time.Now()}
}

// Step prints one progress line.
func (p *Progress) Step(format string, args ...any) {
	if p == nil || p.out == nil {
		return
	}
	fmt.Fprintf(p.out, "[%4.0fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// Elapsed is the time since the Progress was made.
func (p *Progress) Elapsed() time.Duration { return time.Since(p.start) }
