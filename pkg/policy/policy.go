// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/pool"
)

// ErrInvalid is returned by Decide and Validate for a spec or policy that
// can never be applied; retrying does not help until someone edits it.
var ErrInvalid = errors.New("invalid volume spec or policy")

// Builtin returns the policy in force when the cluster defines none: every
// feature off except the SSD-error rule, which lowers to writethrough.
func Builtin() api.Policy {
	return api.Policy{Name: "builtin", OnSSDError: api.OnSSDErrorWritethrough}
}

// Effective lays named over def over Builtin, field by field: a field left
// at its zero value (nil pointer, empty string, 0) inherits. Either
// argument may be nil. The result's Name
// is the most specific policy given. Pointer fields are copied, so the
// result shares no memory with the arguments.
func Effective(def, named *api.Policy) api.Policy {
	out := Builtin()
	for _, p := range []*api.Policy{def, named} {
		if p == nil {
			continue
		}
		if p.Name != "" {
			out.Name = p.Name
		}
		if p.Mode != "" {
			out.Mode = p.Mode
		}
		if p.HighWatermark != nil {
			out.HighWatermark = ptr(*p.HighWatermark)
		}
		if p.LowWatermark != nil {
			out.LowWatermark = ptr(*p.LowWatermark)
		}
		if p.WritebackJobs != nil {
			out.WritebackJobs = ptr(*p.WritebackJobs)
		}
		if p.AutocommitTimeMs != nil {
			out.AutocommitTimeMs = ptr(*p.AutocommitTimeMs)
		}
		if p.SequentialBypassBytes != 0 {
			out.SequentialBypassBytes = p.SequentialBypassBytes
		}
		if p.FlushInterval != 0 {
			out.FlushInterval = p.FlushInterval
		}
		if p.WearThresholdPercent != 0 {
			out.WearThresholdPercent = p.WearThresholdPercent
		}
		if p.OnSSDError != "" {
			out.OnSSDError = p.OnSSDError
		}
		if p.Protect != "" {
			out.Protect = p.Protect
		}
		if p.OnMirrorDegraded != "" {
			out.OnMirrorDegraded = p.OnMirrorDegraded
		}
		if p.MirrorDegradedGrace != 0 {
			out.MirrorDegradedGrace = p.MirrorDegradedGrace
		}
		if p.ReprotectAfter != 0 {
			out.ReprotectAfter = p.ReprotectAfter
		}
		if p.FailoverAfter != 0 {
			out.FailoverAfter = p.FailoverAfter
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// Validate checks the policy with its own Validate (the record's rules
// live in package api, once) and marks a failure ErrInvalid.
func Validate(p api.Policy) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: policy %s: %w", ErrInvalid, p.Name, err)
	}
	return nil
}

// ssdErrorMode is the mode an SSD error caps a volume at under a valid
// Policy.OnSSDError; "none" caps nothing (writeback is the highest mode).
func ssdErrorMode(s string) pool.Mode {
	if s == api.OnSSDErrorNone {
		return pool.ModeWriteback
	}
	return pool.ModeWritethrough
}

// Severity ranks an alert.
type Severity string

// Alert severities.
const (
	// SeverityWarning needs attention soon; the data is safe.
	SeverityWarning Severity = "warning"
	// SeverityCritical needs attention now: tidecache already moved the
	// volume away from an unsafe state, or could not.
	SeverityCritical Severity = "critical"
)

// Alert is a condition an operator should know about.
type Alert struct {
	// Name is one of api's Alert names.
	Name     string
	Severity Severity
	Message  string
}

// String formats an alert as stored in VolumeStatus.Alerts:
// "severity name: message".
func (a Alert) String() string {
	return fmt.Sprintf("%s %s: %s", a.Severity, a.Name, a.Message)
}

// SSD is what is known about one SSD under a volume.
type SSD struct {
	// Path names the SSD in messages (a device path or serial).
	Path string
	// WearPercent is the share of rated endurance used; nil when unknown.
	WearPercent *int
	// MediaErrors counts media and data-integrity errors the operator has
	// not acknowledged (the caller subtracts the acknowledged baseline).
	MediaErrors uint64
	// CriticalWarning is the SMART critical warning flag.
	CriticalWarning bool
}

// Origin is what is known about the redundancy of the volume's HDD array
// (an md RAID10 the node can read; nil for a hardware LUN or when unknown).
type Origin struct {
	// Device names the array in messages (/dev/md127).
	Device string
	// Members is the number of slots; Degraded those without an in-sync
	// member (failed disks and replacements not rebuilt yet).
	Members, Degraded int
	// Failed are the members the kernel marked faulty.
	Failed []string
	// SyncAction is md's sync_action ("idle", "recover", "resync"...).
	SyncAction string
	// SyncProgress is the share of the running sync done, 0..1; negative
	// when none runs.
	SyncProgress float64
}

// Facts are observations of the running system.
type Facts struct {
	// SSDs are the SSDs of the volume's pool.
	SSDs []SSD
	// Origin is the health of the pool's HDD array; nil when unknown.
	Origin *Origin
	// WritecacheError is dm-writecache's error field (0 or a negative
	// errno); 0 when the volume has no write tier running.
	WritecacheError int64
	// DirtyBlocks are the write tier's blocks not yet on the origin.
	DirtyBlocks uint64
	// LastFlush is when the write tier was last flushed (or when the
	// caller started watching it); the zero time means long ago.
	LastFlush time.Time
	// Mirror is the write mirror's state; nil when the volume has none.
	Mirror *Mirror
	// Now is the current time.
	Now time.Time
}

// Mirror is what the mirror rule reads of a volume's write mirror.
type Mirror struct {
	// Running says the mirror is built (the volume is in writeback).
	Running bool
	// LegsOut counts the legs that lack writes or cannot take them: for
	// a running mirror, legs dm-raid reports failed or absent; for one
	// not running, legs whose device is not there to build it again (an
	// SSD missing, a peer that does not export its replica).
	LegsOut int
	// Since is when LegsOut was first seen above 0 in a row of
	// observations (the caller's clock); zero when LegsOut is 0.
	Since time.Time
	// Detail says which legs and why, for the alert.
	Detail string
}

// Latch is the sticky state of the SSD-error rule, carried by the caller
// from one decision to the next.
type Latch struct {
	// Revision is the spec ModRevision the error was seen at; a spec write
	// after it acknowledges the error.
	Revision int64
	// Since is when the error was first seen.
	Since time.Time
	// Reason describes the error.
	Reason string
}

// sinceMark separates a latch's reason from its start time in the alert
// message; LatchFromAlerts parses it back.
const sinceMark = " (since "

// alert is the critical alert a latch raises. Its message carries the
// reason and start time so LatchFromAlerts can restore the latch from a
// stored status after a restart.
func (l *Latch) alert(onErr pool.Mode) Alert {
	action := fmt.Sprintf("kept at most %s", onErr)
	if onErr == pool.ModeWriteback {
		action = "mode left alone (policy onSSDError none)"
	}
	msg := fmt.Sprintf("%s%s%s); %s until the volume spec is updated to acknowledge it",
		l.Reason, sinceMark, l.Since.UTC().Format(time.RFC3339), action)
	return Alert{Name: api.AlertSSDError, Severity: SeverityCritical, Message: msg}
}

// LatchFromAlerts restores a latch from the alerts of a stored status
// (VolumeStatus.Alerts) written for spec revision rev, so an SSD error
// stays latched across a daemon restart even though its evidence is gone
// (the write tier was removed when the volume left writeback). It returns
// nil when the alerts hold no SSD-error alert.
func LatchFromAlerts(alerts []string, rev int64) *Latch {
	prefix := Alert{Name: api.AlertSSDError, Severity: SeverityCritical}.String()
	for _, a := range alerts {
		msg, ok := strings.CutPrefix(a, prefix)
		if !ok {
			continue
		}
		l := &Latch{Revision: rev, Reason: msg}
		if reason, rest, ok := strings.Cut(msg, sinceMark); ok {
			if ts, _, ok := strings.Cut(rest, ")"); ok {
				if since, err := time.Parse(time.RFC3339, ts); err == nil {
					l.Reason, l.Since = reason, since
				}
			}
		}
		return l
	}
	return nil
}

// Input is everything a decision depends on.
type Input struct {
	// Spec is the volume's desired state; SpecRevision its ModRevision.
	Spec         api.VolumeSpec
	SpecRevision int64
	// Policy is the effective policy (see Effective).
	Policy api.Policy
	// Drain is the node's drain flag.
	Drain bool
	Facts Facts
	// Latch is the previous decision's Latch, nil if none.
	Latch *Latch
}

// Decision is what the volume must look like now.
type Decision struct {
	// Mode is the mode the volume must run in.
	Mode pool.Mode
	// Reason says why, for status and logs.
	Reason string
	// Alerts are the conditions raised, most severe first.
	Alerts []Alert
	// FlushNow asks for a flush of the write tier.
	FlushNow bool
	// FlushIn is the time until the next scheduled flush is due; zero when
	// there is no schedule or a flush is due now.
	FlushIn time.Duration
	// Latch is the sticky SSD-error state to pass to the next decision;
	// nil when no error is latched.
	Latch *Latch
}

// AlertStrings formats the decision's alerts for VolumeStatus.Alerts.
func (d Decision) AlertStrings() []string {
	if len(d.Alerts) == 0 {
		return nil
	}
	out := make([]string, len(d.Alerts))
	for i, a := range d.Alerts {
		out[i] = a.String()
	}
	return out
}

// rank orders modes by what the SSD holds that the HDDs lack.
func rank(m pool.Mode) int {
	switch m {
	case pool.ModeWriteback:
		return 2
	case pool.ModeWritethrough:
		return 1
	}
	return 0
}

// ShapeMode is the mode a volume defaults to from its cache slices, the
// same rule the engine applies to a request without a mode.
func ShapeMode(writeCacheBytes, readCacheBytes uint64) pool.Mode {
	switch {
	case writeCacheBytes > 0:
		return pool.ModeWriteback
	case readCacheBytes > 0:
		return pool.ModeWritethrough
	}
	return pool.ModePassthrough
}

// WantedMode is rule 1: the mode asked for before any safety rule.
func WantedMode(spec api.VolumeSpec, p api.Policy) (pool.Mode, string, error) {
	src, s := "spec", spec.Mode
	if s == "" && p.Mode != "" {
		src, s = "policy "+p.Name, p.Mode
	}
	if s == "" {
		return ShapeMode(spec.WriteCacheBytes, spec.ReadCacheBytes), "volume default", nil
	}
	m, err := pool.ParseMode(s)
	if err != nil {
		return "", "", fmt.Errorf("%w: volume %s: %s mode: %w", ErrInvalid, spec.Name, src, err)
	}
	if m == pool.ModeWriteback && spec.WriteCacheBytes == 0 {
		return "", "", fmt.Errorf("%w: volume %s: %s asks for writeback but the volume has no write cache", ErrInvalid, spec.Name, src)
	}
	return m, src, nil
}

// Decide applies the rules of the package documentation. It fails only
// with ErrInvalid.
func Decide(in Input) (Decision, error) {
	if err := Validate(in.Policy); err != nil {
		return Decision{}, err
	}
	mode, why, err := WantedMode(in.Spec, in.Policy)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Mode: mode}
	reasons := []string{fmt.Sprintf("%s asks for %s", why, mode)}
	limit := func(to pool.Mode, because string) {
		if rank(to) < rank(d.Mode) {
			d.Mode = to
			reasons = append(reasons, fmt.Sprintf("%s: %s", to, because))
		}
	}

	// Rule 2: node drain.
	if in.Drain {
		limit(pool.ModePassthrough, "node is drained for maintenance")
	}

	// Rule 3: SSD errors, latched.
	onErr := ssdErrorMode(in.Policy.OnSSDError)
	if live := ssdErrors(in.Facts); live != "" {
		l := &Latch{Revision: in.SpecRevision, Since: in.Facts.Now, Reason: live}
		if in.Latch != nil && in.Latch.Revision >= in.SpecRevision {
			l.Since = in.Latch.Since
		}
		d.Latch = l
	} else if in.Latch != nil && in.Latch.Revision >= in.SpecRevision {
		d.Latch = in.Latch
	}
	if l := d.Latch; l != nil {
		d.Alerts = append(d.Alerts, l.alert(onErr))
		limit(onErr, "SSD error: "+l.Reason)
	}

	// Rule 4: SSD wear.
	if t := in.Policy.WearThresholdPercent; t > 0 {
		var worn []string
		for _, s := range in.Facts.SSDs {
			if s.WearPercent != nil && *s.WearPercent >= t {
				worn = append(worn, fmt.Sprintf("%s at %d%%", s.Path, *s.WearPercent))
			}
		}
		if len(worn) > 0 {
			msg := fmt.Sprintf("SSD wear at or above %d%%: %s", t, strings.Join(worn, ", "))
			d.Alerts = append(d.Alerts, Alert{Name: api.AlertSSDWear, Severity: SeverityWarning, Message: msg})
			limit(pool.ModeWritethrough, msg)
		}
	}

	// Rule 4b: a write mirror short of a leg. Writeback on one copy is
	// alerted at once and, unless the policy keeps it, drained to
	// writethrough after the grace time; a mirror that cannot be built
	// whole keeps the volume out of writeback until it can.
	if m := in.Facts.Mirror; m != nil && m.LegsOut > 0 && mode == pool.ModeWriteback {
		grace := time.Duration(in.Policy.MirrorDegradedGrace)
		if grace == 0 {
			grace = api.DefaultMirrorDegradedGrace
		}
		keep := in.Policy.OnMirrorDegraded == api.OnMirrorDegradedKeep
		var msg string
		switch {
		case !m.Running:
			msg = "write mirror cannot be built whole: " + m.Detail
			if !keep {
				limit(pool.ModeWritethrough, msg+"; writeback resumes once it can")
			}
		default:
			msg = fmt.Sprintf("write mirror on one copy since %s: %s", m.Since.UTC().Format(time.RFC3339), m.Detail)
			if !keep && !in.Facts.Now.Before(m.Since.Add(grace)) {
				limit(pool.ModeWritethrough, fmt.Sprintf("%s; drained after %s (policy onMirrorDegraded)", msg, grace))
			}
		}
		d.Alerts = append(d.Alerts, Alert{Name: api.AlertMirrorDegraded, Severity: SeverityCritical, Message: msg})
	}

	// Rule 5: degraded origin. Alert only; the mode is kept (see the
	// package documentation for why).
	if o := in.Facts.Origin; o != nil && o.Degraded > 0 {
		d.Alerts = append(d.Alerts, Alert{Name: api.AlertOriginDegraded, Severity: SeverityWarning, Message: o.describe()})
	}

	// Rule 6: scheduled flush.
	if iv := time.Duration(in.Policy.FlushInterval); iv > 0 && d.Mode == pool.ModeWriteback {
		due := in.Facts.LastFlush.Add(iv)
		switch {
		case in.Facts.LastFlush.IsZero() || !in.Facts.Now.Before(due):
			d.FlushNow = in.Facts.DirtyBlocks > 0
			if !d.FlushNow {
				d.FlushIn = iv // clean now: look again one interval later
			}
		default:
			d.FlushIn = due.Sub(in.Facts.Now)
		}
	}
	d.Reason = strings.Join(reasons, "; ")
	return d, nil
}

// ssdErrors describes the live SSD-error evidence, "" when there is none.
func ssdErrors(f Facts) string {
	var ev []string
	if f.WritecacheError != 0 {
		ev = append(ev, fmt.Sprintf("dm-writecache error %d", f.WritecacheError))
	}
	for _, s := range f.SSDs {
		if s.CriticalWarning {
			ev = append(ev, s.Path+" SMART critical warning")
		}
		if s.MediaErrors > 0 {
			ev = append(ev, fmt.Sprintf("%s %d new media errors", s.Path, s.MediaErrors))
		}
	}
	return strings.Join(ev, ", ")
}

// describe says what is wrong with a degraded origin and what the rule
// did, for the alert.
func (o *Origin) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HDD array %s degraded: %d of %d slots without an in-sync member", o.Device, o.Degraded, o.Members)
	if len(o.Failed) > 0 {
		fmt.Fprintf(&b, " (failed: %s)", strings.Join(o.Failed, ", "))
	}
	switch {
	case o.SyncAction == "recover" && o.SyncProgress >= 0:
		fmt.Fprintf(&b, "; rebuild %.0f%% done", o.SyncProgress*100)
	case o.SyncAction == "recover":
		b.WriteString("; rebuild pending")
	default:
		b.WriteString("; no rebuild running: replace the disk (docs/runbook.md)")
	}
	b.WriteString("; cache mode kept, the write cache keeps the write load off the degraded array")
	return b.String()
}
