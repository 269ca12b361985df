// SPDX-License-Identifier: Apache-2.0

package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/pool"
)

// DefaultPolicy is the name of the policy that applies to every volume whose
// spec names none.
const DefaultPolicy = "default"

// Values of Policy.OnMirrorDegraded.
const (
	// OnMirrorDegradedWritethrough drains a volume whose write mirror has
	// lost a leg for MirrorDegradedGrace and keeps it in writethrough
	// until the mirror can be built whole again.
	OnMirrorDegradedWritethrough = "writethrough"
	// OnMirrorDegradedKeep keeps writeback on one copy, with the alert.
	OnMirrorDegradedKeep = "keep"
)

// DefaultMirrorDegradedGrace is how long a write mirror may run on one leg
// before OnMirrorDegradedWritethrough drains it: long enough for a peer to
// reboot or an SSD to be reseated, short enough that one copy of the dirty
// blocks is the exception.
const DefaultMirrorDegradedGrace = 10 * time.Minute

// DefaultReprotectAfter is how long the node keeping a peer-protected
// volume's replica may be gone before the leader places the replica on
// another node and the owner rebuilds its mirror there: long enough for a
// node to reboot (which resyncs only what its bitmap marks; a move copies
// the whole write cache over the network), well inside
// DefaultMirrorDegradedGrace, so that a volume is re-protected before it
// is drained.
const DefaultReprotectAfter = 5 * time.Minute

// DefaultFailoverAfter is how long the node of a volume on a shared origin
// may be gone (its record expired, which takes the lease TTL already)
// before the leader fences it and fails the volume over to its replica's
// node: a node that reboots is back sooner and keeps its volume, one that
// is down or cut off does not keep the database waiting for minutes.
const DefaultFailoverAfter = 30 * time.Second

// Values of Policy.OnSSDError.
const (
	OnSSDErrorWritethrough = "writethrough"
	OnSSDErrorNone         = "none"
)

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
	// OnSSDError is what an SSD I/O error does: OnSSDErrorWritethrough
	// (the default, also when empty) or OnSSDErrorNone.
	OnSSDError string `json:"onSSDError,omitempty"`
	// OnMirrorDegraded is what a write mirror that lost a leg does:
	// OnMirrorDegradedWritethrough (the default, also when empty) or
	// OnMirrorDegradedKeep. MirrorDegradedGrace is how long it may run on
	// one leg first (0: DefaultMirrorDegradedGrace).
	OnMirrorDegraded    string   `json:"onMirrorDegraded,omitempty"`
	MirrorDegradedGrace Duration `json:"mirrorDegradedGrace,omitempty"`
	// ReprotectAfter is how long the node keeping a peer-protected
	// volume's replica may be gone (its record expired) before the leader
	// places the replica on another node (0: DefaultReprotectAfter).
	ReprotectAfter Duration `json:"reprotectAfter,omitempty"`
	// FailoverAfter is how long the node of a volume on a shared origin
	// may be gone before the leader fences it and moves the volume to its
	// replica's node (0: DefaultFailoverAfter).
	FailoverAfter Duration `json:"failoverAfter,omitempty"`
	// Protect, if set, is the protection of volumes whose spec sets none:
	// "none", "local" or "peer". Read when a volume is created; an existing
	// volume keeps the protection it was created with.
	Protect string `json:"protect,omitempty"`
}

// Validate checks the policy on its own and reports every problem.
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
	if p.Protect != "" {
		if _, err := pool.ParseProtection(p.Protect); err != nil {
			add("protect %q: want none, local or peer", p.Protect)
		}
	}
	switch p.OnMirrorDegraded {
	case "", OnMirrorDegradedWritethrough, OnMirrorDegradedKeep:
	default:
		add("onMirrorDegraded %q: want %q or %q", p.OnMirrorDegraded, OnMirrorDegradedWritethrough, OnMirrorDegradedKeep)
	}
	if p.MirrorDegradedGrace < 0 {
		add("mirrorDegradedGrace %s: must not be negative", time.Duration(p.MirrorDegradedGrace))
	}
	if p.FailoverAfter < 0 {
		add("failoverAfter %s: must not be negative", time.Duration(p.FailoverAfter))
	}
	if p.ReprotectAfter < 0 {
		add("reprotectAfter %s: must not be negative", time.Duration(p.ReprotectAfter))
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
