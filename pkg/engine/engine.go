// SPDX-License-Identifier: Apache-2.0

// Package engine is tidecache's single-node data-path manager: it creates
// pools from SSDs and an HDD array, carves volumes, builds their
// device-mapper stacks, changes cache modes live, flushes, deletes, and
// re-assembles everything at boot from the SSD superblocks alone.
//
// The engine keeps no state of its own between calls. The superblocks on
// the pool's devices are the record of what exists; the kernel's dm tables
// are what runs. Every operation reads both, so running the same command
// twice is harmless and a crashed command leaves a state the next one (or
// boot assembly) can finish.
//
// Safety rules enforced here:
//   - a device holding a filesystem, RAID or partition-table signature, or
//     in use, is never made part of a pool without Force;
//   - the write tier is removed from a volume only after the kernel reports
//     zero dirty blocks while the volume is suspended;
//   - an origin whose cache may hold dirty data is never exposed without
//     that cache: a pool with a missing or corrupt member is not assembled,
//     unless that member holds only legs of write mirrors whose other leg
//     is present;
//   - cache metadata is zeroed only on slices the layout says hold no
//     dirty data, and before the layout naming them is written.
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/command"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/mdraid"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/stack"
)

// Config configures an Engine. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Tuning are the cache target knobs applied to every volume.
	Tuning stack.Tuning
	// SysRoot and ProcRoot locate sysfs and procfs (tests may point them
	// elsewhere for pure parts).
	SysRoot, ProcRoot string
	// LockPath is the file locked for the duration of every change, so two
	// tidectl commands never edit a pool at the same time.
	LockPath string
	// PollInterval is how often status is read while draining or flushing.
	PollInterval time.Duration
	// DrainTimeout bounds the wait for a write tier to become clean; zero
	// waits until the context is done.
	DrainTimeout time.Duration
	// UdevRulesDir is where the rules for adopted devices are written
	// (AdoptedRulesFile); "" writes none.
	UdevRulesDir string
	// ExpectedPoolsFile lists the pools of this node, rewritten at every
	// layout change, so that boot assembly waits for a pool none of whose
	// disks has shown up yet (WaitForDevices); "" keeps no list.
	ExpectedPoolsFile string
	// PauseAt names a point inside a multi-step change where the engine
	// stops and waits for its context to end (or the power to be cut):
	// the VM tests cut the power there to prove the step is crash-safe.
	// DefaultConfig takes it from TIDECACHE_TEST_PAUSE_AT; "" never
	// pauses.
	PauseAt string
	// NVMeAuth gives the DH-HMAC-CHAP secrets of NVMe/TCP exports and
	// attaches (tidecached's keyring, handed out through etcd); nil: none,
	// exports admit hosts by their NQN and attaches present no secret.
	NVMeAuth NVMeAuth
}

// NVMeAuth gives the secrets of NVMe in-band authentication by node (see
// pkg/nvmeauth). An empty secret means none: the peer cannot
// authenticate, and its daemon decided to do without.
type NVMeAuth interface {
	// ExportKey is the secret this node's target requires of host.
	ExportKey(ctx context.Context, host string) (string, error)
	// HostSecret is the secret this node presents to exporter's target.
	HostSecret(ctx context.Context, exporter string) (string, error)
}

// DefaultConfig returns the configuration tidectl and tidecached use.
func DefaultConfig() Config {
	return Config{
		Tuning:       stack.DefaultTuning(),
		SysRoot:      "/sys",
		ProcRoot:     "/proc",
		LockPath:     "/run/tidecache/engine.lock",
		PollInterval: 200 * time.Millisecond,
		UdevRulesDir: "/etc/udev/rules.d",
		// On the root file system, which is mounted when boot assembly
		// runs (/var may not be).
		ExpectedPoolsFile: "/etc/tidecache/" + ExpectedPoolsFileName,
		PauseAt:           os.Getenv("TIDECACHE_TEST_PAUSE_AT"),
	}
}

// Validate checks the configuration and names the bad field.
func (c Config) Validate() error {
	switch {
	case c.SysRoot == "":
		return fmt.Errorf("config: SysRoot is empty")
	case c.ProcRoot == "":
		return fmt.Errorf("config: ProcRoot is empty")
	case c.LockPath == "":
		return fmt.Errorf("config: LockPath is empty")
	case c.PollInterval <= 0:
		return fmt.Errorf("config: PollInterval must be positive, got %s", c.PollInterval)
	case c.Tuning.ReadBlockSectors != 0 && (c.Tuning.ReadBlockSectors > pool.MaxReadBlockSize/pool.SectorSize ||
		!pool.ValidReadBlockSize(uint32(c.Tuning.ReadBlockSectors*pool.SectorSize))):
		// New volumes record this size (see withReadBlockSize), so it must
		// be one a volume may choose.
		return fmt.Errorf("config: Tuning.ReadBlockSectors %d: want a power of two from %d to %d sectors",
			c.Tuning.ReadBlockSectors, pool.MinReadBlockSize/pool.SectorSize, pool.MaxReadBlockSize/pool.SectorSize)
	}
	return nil
}

// Engine manages the pools and volumes of this node. Methods are safe for
// concurrent use; changes are serialised by a file lock shared with every
// other tidecache process on the node.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	dm      *dm.Client
	md      mdraid.Manager
	runner  command.Runner // modprobe; other tools go through md and prober
	prober  blockdev.Prober
	checker blockdev.Checker
	disks   disks
	// initiator attaches peer legs, target exports replicas (NVMe/TCP).
	initiator nvmeof.Initiator
	target    nvmeof.Target

	// udevControl is udevd's control socket, which exists while udevd
	// runs: then new udev rules are applied at once.
	udevControl string

	mu       sync.Mutex
	versions map[string]dm.Version
	// mirrors is the out-of-sync legs of every running write mirror as
	// RecordMirrors last recorded them.
	mirrors map[string][]int
}

// New opens the device-mapper control device and returns an Engine. The
// caller closes it.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	client, err := dm.Open()
	if err != nil {
		return nil, err // dm.Open names the control device and the module to load
	}
	client.SetUdevFlags(stack.UdevFlags)
	return NewWithClient(cfg, client)
}

// NewWithClient returns an Engine that drives device-mapper through
// client, for instance one on the fake kernel of package dm/dmtest in host
// tests. The Engine owns client: Close closes it, also when cfg is
// refused here.
func NewWithClient(cfg Config, client *dm.Client) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		_ = client.Close()
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	runner := command.Runner{Logger: log}
	return &Engine{
		cfg:       cfg,
		log:       log,
		dm:        client,
		md:        mdraid.Manager{Runner: runner},
		runner:    runner,
		prober:    blockdev.Prober{Runner: runner},
		checker:   blockdev.Checker{SysRoot: cfg.SysRoot, ProcRoot: cfg.ProcRoot},
		disks:     hostDisks{sysRoot: cfg.SysRoot},
		initiator: nvmeof.Initiator{Fabrics: "/dev/nvme-fabrics", SysRoot: cfg.SysRoot, DevRoot: "/dev", Poll: 100 * time.Millisecond},
		target:    nvmeof.NewTarget(),

		udevControl: "/run/udev/control",
	}, nil
}

// Close releases the device-mapper control device.
func (e *Engine) Close() error { return e.dm.Close() }

// DM exposes the device-mapper client for read-only inspection by callers
// such as the metrics collectors.
func (e *Engine) DM() *dm.Client { return e.dm }

// lock takes the node-wide change lock. The returned function releases it.
func (e *Engine) lock(ctx context.Context) (func(), error) {
	// A flush or drain holds it for as long as the HDDs take: say what
	// a command waits for instead of hanging silently.
	return e.lockFile(ctx, e.cfg.LockPath, "the node lock: another tidectl or tidecached is changing a pool")
}

// lockFile takes an exclusive flock on path (gofrs/flock), waiting until
// ctx ends and saying on the log, after a second and then every half
// minute, what it waits for (what) and who holds it. The holder's pid and
// command line go into the file for those who wait. The returned function
// releases it; so does the process's exit, however it ends.
func (e *Engine) lockFile(ctx context.Context, path, what string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	fl := flock.New(path, flock.SetFlag(os.O_RDWR|os.O_CREATE), flock.SetPermissions(0o600))
	start := time.Now()
	say := start.Add(lockWaitSay)
	for {
		tryCtx, cancel := context.WithDeadline(ctx, say)
		locked, err := fl.TryLockContext(tryCtx, 100*time.Millisecond)
		cancel()
		switch {
		case locked:
			// Say who holds it, for the commands that will wait: the
			// lock is on the file, not its contents.
			_ = os.WriteFile(path, []byte(lockHolder(time.Now())), 0o600)
			return func() { _ = fl.Close() }, nil
		case ctx.Err() != nil:
			holder, _ := os.ReadFile(path)
			return nil, fmt.Errorf("wait for lock %s (held by %s): %w", path, cmp.Or(strings.TrimSpace(string(holder)), "another tidectl or tidecached"), ctx.Err())
		case err != nil && !errors.Is(err, context.DeadlineExceeded):
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		holder, _ := os.ReadFile(path)
		now := time.Now()
		e.log.Warn("waiting for "+what, "holder", strings.TrimSpace(string(holder)), "waited", now.Sub(start).Round(time.Second))
		say = now.Add(lockWaitRepeat)
	}
}

// heldByOther reports whether another open file holds a flock on path: a
// process, alive, that took it with lockFile. A missing file is not held.
func heldByOther(path string) bool {
	fl := flock.New(path, flock.SetFlag(os.O_RDONLY))
	ok, err := fl.TryRLock()
	if err != nil {
		return false
	}
	if ok {
		_ = fl.Close()
	}
	return !ok
}

// When a command waiting for the node lock first says so, and how often
// it repeats it.
const (
	lockWaitSay    = time.Second
	lockWaitRepeat = 30 * time.Second
)

// lockHolder describes this process for the lock file: its pid, command
// line and since when it holds the lock.
func lockHolder(since time.Time) string {
	cmd := "unknown command"
	if b, err := os.ReadFile("/proc/self/cmdline"); err == nil {
		cmd = strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	}
	return fmt.Sprintf("pid %d (%s) since %s\n", os.Getpid(), cmd, since.Format(time.RFC3339))
}

// targetVersion returns the loaded version of a dm target type, reading the
// kernel's list once.
func (e *Engine) targetVersion(ctx context.Context, target string) (dm.Version, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if v, ok := e.versions[target]; ok {
		return v, nil
	}
	vs, err := e.dm.TargetVersions(ctx)
	if err != nil {
		return dm.Version{}, fmt.Errorf("list dm target versions: %w", err)
	}
	if _, ok := vs[target]; !ok {
		return dm.Version{}, fmt.Errorf("dm target %q is not loaded (modprobe dm-%s)", target, target)
	}
	e.versions = vs
	return vs[target], nil
}

// pause stops at point when Config.PauseAt names it, until ctx ends: a
// power cut test kills the machine there. It says so on the log first.
func (e *Engine) pause(ctx context.Context, point string) error {
	if e.cfg.PauseAt == "" || e.cfg.PauseAt != point {
		return nil
	}
	e.log.Warn("paused for a test (TIDECACHE_TEST_PAUSE_AT)", "point", point)
	fmt.Fprintf(os.Stderr, "tidecache: paused at %s\n", point)
	<-ctx.Done()
	return ctx.Err()
}
