package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/pool"
)

// Record kinds, as written in a record's "kind" field and in Event.Kind.
const (
	KindVolumeSpec   = "VolumeSpec"
	KindVolumeStatus = "VolumeStatus"
	KindNode         = "Node"
	KindNodeSpec     = "NodeSpec"
	KindPolicy       = "Policy"
)

// DefaultPolicy is the name of the policy that applies to every volume whose
// spec names none.
const DefaultPolicy = "default"

// Values of Policy.OnSSDError.
const (
	OnSSDErrorWritethrough = "writethrough"
	OnSSDErrorNone         = "none"
)

// VolumeSpec is the desired state of one volume, written by users through
// tidectl. Only the owning node acts on it.
type VolumeSpec struct {
	// Name is the volume name (pool.ValidateName rules); the device is
	// /dev/mapper/tc-<Name>.
	Name string `json:"name"`
	// Node is the node that holds the volume. Empty means "not placed
	// yet": the leader picks a node with room and updates the spec.
	Node string `json:"node,omitempty"`
	// Pool is the pool on Node the volume is carved from. Empty means the
	// node picks (it has one pool, or the leader chose when placing).
	Pool string `json:"pool,omitempty"`
	// SizeBytes is the volume size on the origin.
	SizeBytes uint64 `json:"sizeBytes"`
	// WriteCacheBytes is the write tier (dm-writecache) slice; 0 means
	// none, and then Mode cannot be writeback.
	WriteCacheBytes uint64 `json:"writeCacheBytes,omitempty"`
	// ReadCacheBytes is the read tier (dm-cache) slice; 0 means none.
	ReadCacheBytes uint64 `json:"readCacheBytes,omitempty"`
	// Mode is writeback, writethrough or passthrough. Empty means the
	// policy's Mode, else writeback when there is a write tier, else
	// writethrough.
	Mode string `json:"mode,omitempty"`
	// BlockSize is the dm-writecache block size; 0 means
	// pool.DefaultBlockSize.
	BlockSize uint32 `json:"blockSize,omitempty"`
	// ReadBlockSize is the read tier's dm-cache block size in bytes, a
	// power of two from 32 KiB to 1 MiB; 0 means the node's default. It
	// needs ReadCacheBytes and is fixed once the volume exists.
	ReadBlockSize uint32 `json:"readBlockSize,omitempty"`
	// AllowFUAWindow builds the write tier without tidecache's fuaflush
	// kernel target (tidectl volume create --allow-fua-window): FUA writes
	// can then be lost on power failure. It needs WriteCacheBytes and is
	// fixed once the volume exists.
	AllowFUAWindow bool `json:"allowFUAWindow,omitempty"`
	// Policy names a Policy record; empty means DefaultPolicy.
	Policy string `json:"policy,omitempty"`
}

// Validate checks the spec on its own. The minimum sizes of package pool
// are not enforced here but when the node creates the volume (the error
// then shows in the status): a stored spec must stay valid if they change.
func (v VolumeSpec) Validate() error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	if err := pool.ValidateName("volume", v.Name); err != nil {
		add(err)
	}
	if v.Node != "" {
		if err := ValidateNodeName(v.Node); err != nil {
			add(err)
		}
	}
	if v.Pool != "" {
		if err := pool.ValidateName("pool", v.Pool); err != nil {
			add(err)
		}
	}
	if v.SizeBytes == 0 {
		add(errors.New("sizeBytes must be greater than 0"))
	}
	if v.Mode != "" {
		if m, err := pool.ParseMode(v.Mode); err != nil {
			add(err)
		} else if m == pool.ModeWriteback && v.WriteCacheBytes == 0 {
			add(errors.New("mode writeback needs writeCacheBytes greater than 0"))
		}
	}
	if v.BlockSize != 0 && !pool.ValidBlockSize(v.BlockSize) {
		add(fmt.Errorf("blockSize %d: want a power of two from 512 to 4096", v.BlockSize))
	}
	if v.ReadBlockSize != 0 {
		switch {
		case v.ReadCacheBytes == 0:
			add(fmt.Errorf("readBlockSize %d needs readCacheBytes greater than 0", v.ReadBlockSize))
		case !pool.ValidReadBlockSize(v.ReadBlockSize):
			add(fmt.Errorf("readBlockSize %d: want a power of two from %d to %d", v.ReadBlockSize, pool.MinReadBlockSize, pool.MaxReadBlockSize))
		}
	}
	if v.AllowFUAWindow && v.WriteCacheBytes == 0 {
		add(errors.New("allowFUAWindow needs writeCacheBytes greater than 0"))
	}
	if v.Policy != "" {
		if err := pool.ValidateName("policy", v.Policy); err != nil {
			add(err)
		}
	}
	return errors.Join(errs...)
}

// VolumeStatus is the observed state of one volume, written only by the
// daemon of the node that owns it (VolumeSpec.Node).
type VolumeStatus struct {
	Name string `json:"name"`
	Node string `json:"node"`
	// ObservedRevision is the ModRevision of the spec this status reflects.
	// A status whose ObservedRevision is below the spec's ModRevision is
	// for an older spec: the change has not been applied yet.
	ObservedRevision int64 `json:"observedRevision"`
	// Mode is the mode the kernel tables are in now.
	Mode string `json:"mode,omitempty"`
	// State is the reconciler's one-word summary (pkg/reconcile defines the
	// values); Error the last error, empty when healthy.
	State string `json:"state,omitempty"`
	Error string `json:"error,omitempty"`
	// DirtyBlocks and DirtyBytes are what the write tier holds that the
	// origin does not.
	DirtyBlocks uint64 `json:"dirtyBlocks"`
	DirtyBytes  uint64 `json:"dirtyBytes"`
	// ReadHitRatio and WriteHitRatio are in [0, 1].
	ReadHitRatio  float64 `json:"readHitRatio"`
	WriteHitRatio float64 `json:"writeHitRatio"`
	// Alerts are raised conditions in words ("SSD wear 92% >= 90%").
	Alerts    []string  `json:"alerts,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Validate checks the status on its own.
func (v VolumeStatus) Validate() error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	if err := pool.ValidateName("volume", v.Name); err != nil {
		add(err)
	}
	if err := ValidateNodeName(v.Node); err != nil {
		add(err)
	}
	if v.ObservedRevision < 0 {
		add(fmt.Errorf("observedRevision %d: must not be negative", v.ObservedRevision))
	}
	if v.Mode != "" {
		if _, err := pool.ParseMode(v.Mode); err != nil {
			add(err)
		}
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"readHitRatio", v.ReadHitRatio}, {"writeHitRatio", v.WriteHitRatio}} {
		if math.IsNaN(r.v) || r.v < 0 || r.v > 1 {
			add(fmt.Errorf("%s %v: want a ratio in [0, 1]", r.name, r.v))
		}
	}
	return errors.Join(errs...)
}

// Node is a node's inventory, written by its daemon under its lease
// (Register): the record disappears when the node stops renewing it.
type Node struct {
	Name string `json:"name"`
	// Address is where peers and tidectl reach the daemon (host:port).
	Address string `json:"address,omitempty"`
	// Version is the daemon's version.
	Version   string          `json:"version,omitempty"`
	Pools     []PoolInventory `json:"pools,omitempty"`
	SSDs      []SSDInventory  `json:"ssds,omitempty"`
	StartedAt time.Time       `json:"startedAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

// PoolInventory describes one pool on a node.
type PoolInventory struct {
	Name string `json:"name"`
	UUID string `json:"uuid,omitempty"`
	// Origin is the origin device path.
	Origin string `json:"origin,omitempty"`
	// OriginFreeBytes and SSDFreeBytes are the free space the allocator
	// can still carve (SSDFreeBytes: summed over members).
	OriginFreeBytes uint64 `json:"originFreeBytes"`
	SSDFreeBytes    uint64 `json:"ssdFreeBytes"`
}

// SSDInventory describes one SSD on a node and its health.
type SSDInventory struct {
	Path   string `json:"path"`
	Model  string `json:"model,omitempty"`
	Serial string `json:"serial,omitempty"`
	// Pool is the pool the SSD is a member of, empty if none.
	Pool      string `json:"pool,omitempty"`
	SizeBytes uint64 `json:"sizeBytes"`
	// WearPercent is the NVMe "percentage used" (may exceed 100); nil when
	// the device does not report it.
	WearPercent     *int   `json:"wearPercent,omitempty"`
	MediaErrors     uint64 `json:"mediaErrors,omitempty"`
	CriticalWarning bool   `json:"criticalWarning,omitempty"`
}

// Validate checks the node record on its own.
func (n Node) Validate() error {
	var errs []error
	if err := ValidateNodeName(n.Name); err != nil {
		errs = append(errs, err)
	}
	for _, p := range n.Pools {
		if err := pool.ValidateName("pool", p.Name); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range n.SSDs {
		if s.Path == "" {
			errs = append(errs, errors.New("ssd with empty path"))
		}
		if s.WearPercent != nil && *s.WearPercent < 0 {
			errs = append(errs, fmt.Errorf("ssd %s: wearPercent %d: must not be negative", s.Path, *s.WearPercent))
		}
	}
	return errors.Join(errs...)
}

// NodeSpec is the desired state of a node, written by users.
type NodeSpec struct {
	Name string `json:"name"`
	// Drain asks the node to bring every volume it owns to passthrough
	// with clean caches, for maintenance. Clearing it restores the modes
	// the specs and policies ask for.
	Drain bool `json:"drain,omitempty"`
}

// Validate checks the node spec on its own.
func (n NodeSpec) Validate() error { return ValidateNodeName(n.Name) }

// Policy holds tunables shared by volumes. Pointer fields distinguish
// "not set, keep the kernel's default" from a value; zero values of the
// other fields switch their feature off.
type Policy struct {
	Name string `json:"name"`
	// Mode, if set, is the mode of volumes whose spec sets none.
	Mode string `json:"mode,omitempty"`
	// HighWatermark and LowWatermark are dm-writecache's writeback
	// watermarks in percent of the cache (kernel defaults 50 and 45).
	HighWatermark *int `json:"highWatermark,omitempty"`
	LowWatermark  *int `json:"lowWatermark,omitempty"`
	// WritebackJobs limits dm-writecache's writeback I/Os in flight.
	WritebackJobs *uint64 `json:"writebackJobs,omitempty"`
	// AutocommitTimeMs is dm-writecache's autocommit_time in milliseconds
	// (kernel default 1000; 1 to 60000): shorter makes FUA-only writes
	// durable sooner at the cost of more metadata writes to the SSD.
	AutocommitTimeMs *uint64 `json:"autocommitTimeMs,omitempty"`
	// SequentialBypassBytes: sequential writes of at least this size go
	// around the write cache where the kernel target allows it; 0 = off.
	SequentialBypassBytes uint64 `json:"sequentialBypassBytes,omitempty"`
	// FlushInterval flushes the write cache on this schedule; 0 = off.
	FlushInterval Duration `json:"flushInterval,omitempty"`
	// WearThresholdPercent: an SSD at or above this wear turns its
	// volumes to writethrough and raises an alert; 0 = off.
	WearThresholdPercent int `json:"wearThresholdPercent,omitempty"`
	// OnSSDError is what an SSD I/O error does: "writethrough" (the
	// default, also when empty) or "none".
	OnSSDError string `json:"onSSDError,omitempty"`
}

// Validate checks the policy on its own.
func (p Policy) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if err := pool.ValidateName("policy", p.Name); err != nil {
		errs = append(errs, err)
	}
	if p.Mode != "" {
		if _, err := pool.ParseMode(p.Mode); err != nil {
			errs = append(errs, err)
		}
	}
	for _, w := range []struct {
		name string
		v    *int
	}{{"highWatermark", p.HighWatermark}, {"lowWatermark", p.LowWatermark}} {
		if w.v != nil && (*w.v < 0 || *w.v > 100) {
			add("%s %d: want a percentage from 0 to 100", w.name, *w.v)
		}
	}
	if p.HighWatermark != nil && p.LowWatermark != nil && *p.LowWatermark > *p.HighWatermark {
		add("lowWatermark %d is above highWatermark %d", *p.LowWatermark, *p.HighWatermark)
	}
	if p.WritebackJobs != nil && *p.WritebackJobs == 0 {
		add("writebackJobs 0: want at least 1 (leave it unset for the kernel default)")
	}
	if a := p.AutocommitTimeMs; a != nil && (*a < pool.MinAutocommitTimeMs || *a > pool.MaxAutocommitTimeMs) {
		add("autocommitTimeMs %d: want %d to %d (leave it unset for the kernel default)", *a, pool.MinAutocommitTimeMs, pool.MaxAutocommitTimeMs)
	}
	if p.FlushInterval < 0 {
		add("flushInterval %s: must not be negative", p.FlushInterval)
	} else if p.FlushInterval > 0 && p.FlushInterval < Duration(time.Second) {
		add("flushInterval %s: want at least 1s, or 0 for off", p.FlushInterval)
	}
	if p.WearThresholdPercent < 0 || p.WearThresholdPercent > 100 {
		add("wearThresholdPercent %d: want 1 to 100, or 0 for off", p.WearThresholdPercent)
	}
	switch p.OnSSDError {
	case "", OnSSDErrorWritethrough, OnSSDErrorNone:
	default:
		add("onSSDError %q: want %q or %q", p.OnSSDError, OnSSDErrorWritethrough, OnSSDErrorNone)
	}
	return errors.Join(errs...)
}

// Duration is a time.Duration written in JSON as a Go duration string
// ("1h", "90s"), so records stay readable with etcdctl.
type Duration time.Duration

// String formats d like time.Duration without trailing zero units: "1h",
// "1h30m", "90s" prints as "1m30s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string; bare numbers are refused because
// their unit would be a guess.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string such as \"1h\" or \"30m\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// MaxNodeNameLen is the longest node name.
const MaxNodeNameLen = 253

// ValidateNodeName checks a node name: 1 to MaxNodeNameLen characters
// from a-z, 0-9, '-' and '.', starting and ending with a letter or digit.
// These are lowercase DNS names, which host names and Kubernetes node names
// already are; the daemon lowercases the host name. No '/' can appear, so a
// name is always one etcd key segment.
func ValidateNodeName(name string) error {
	bad := func(why string) error { return fmt.Errorf("invalid node name %q: %s", name, why) }
	if name == "" {
		return bad("empty")
	}
	if len(name) > MaxNodeNameLen {
		return bad(fmt.Sprintf("longer than %d characters", MaxNodeNameLen))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return bad("only a-z, 0-9, '-' and '.' allowed")
		}
	}
	if first, last := name[0], name[len(name)-1]; first == '-' || first == '.' || last == '-' || last == '.' {
		return bad("must start and end with a letter or digit")
	}
	return nil
}
