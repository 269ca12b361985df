// SPDX-License-Identifier: Apache-2.0

package dm

import "errors"

// ErrHoldTarget is the target type of tidecache's dm-errhold
// (kernel/dm-errhold). It maps one device at an offset, like linear, but
// a bio the device fails is held, not completed, until a message says to
// retry or to fail it. Under the peer leg of a mirrored write cache it
// keeps md from dropping the leg and acknowledging a write on the local
// leg alone before the cluster has recorded that the replica is behind.
const ErrHoldTarget = "errhold"

// ErrHoldModule is the kernel module that provides ErrHoldTarget.
const ErrHoldModule = "dm-errhold"

// The messages an errhold target takes.
const (
	// ErrHoldRetry resubmits every held bio: the path is back.
	ErrHoldRetry = "retry"
	// ErrHoldFail completes every held bio with its error and passes
	// errors through from then on: the layer above may fail the leg.
	ErrHoldFail = "fail"
	// ErrHoldHold holds errors again after ErrHoldFail.
	ErrHoldHold = "hold"
)

// ErrHoldParams are the constructor parameters of an errhold target.
type ErrHoldParams struct {
	Device string // path or "major:minor"
	Offset uint64 // first sector on Device
}

// String returns "<dev> <offset>", the form the kernel prints in the
// table.
func (p ErrHoldParams) String() string { return LinearParams(p).String() }

// Target returns an errhold target mapping [start, start+length) onto
// Device from Offset.
func (p ErrHoldParams) Target(start, length uint64) Target {
	return Target{Start: start, Length: length, Type: ErrHoldTarget, Params: p.String()}
}

// Equivalent reports whether p and o map the same sectors of the same
// device once canon has resolved both device references.
func (p ErrHoldParams) Equivalent(o ErrHoldParams, canon DeviceCanon) (bool, error) {
	return LinearParams(p).Equivalent(LinearParams(o), canon)
}

// Validate checks the parameters before they reach the kernel.
func (p ErrHoldParams) Validate() error {
	return validateDevice("errhold params", "device", p.Device)
}

// ParseErrHoldParams parses the parameters of an errhold target.
//
// Grammar (kernel/dm-errhold/dm-errhold.c, errhold_ctr):
//
//	<dev path> <offset>
//
//	dev path: the device below, a path or major:minor
//	offset:   start sector on that device
func ParseErrHoldParams(s string) (ErrHoldParams, error) {
	p, err := parseDeviceOffset("errhold params", s)
	return ErrHoldParams(p), err
}

// ErrHoldStatus is the status of an errhold target.
type ErrHoldStatus struct {
	// Passing says ErrHoldFail was sent: errors go up, nothing is held.
	Passing bool `json:"passing"`
	// HeldNow counts the bios held right now: I/O the device failed that
	// the layer above still waits for.
	HeldNow uint64 `json:"held_now"`
	// HeldTotal, Retried and Failed count the bios held, resubmitted by
	// ErrHoldRetry and completed with their error by ErrHoldFail since
	// the table was loaded.
	HeldTotal uint64 `json:"held_total"`
	Retried   uint64 `json:"retried"`
	Failed    uint64 `json:"failed"`
	// Errors counts the errors the device returned.
	Errors uint64 `json:"errors"`
}

// ParseErrHoldStatus parses the status of an errhold target:
//
//	<hold|pass> <held now> <held total> <retried> <failed> <errors>
func ParseErrHoldStatus(params string) (ErrHoldStatus, error) {
	r := newArgReader("errhold status", params)
	var s ErrHoldStatus
	mode, err := r.next("mode")
	if err != nil {
		return ErrHoldStatus{}, err
	}
	switch mode {
	case "hold":
	case "pass":
		s.Passing = true
	default:
		return ErrHoldStatus{}, r.fail("mode", mode, errors.New("want hold or pass"))
	}
	for _, f := range []struct {
		name string
		dst  *uint64
	}{
		{"held now", &s.HeldNow},
		{"held total", &s.HeldTotal},
		{"retried", &s.Retried},
		{"failed", &s.Failed},
		{"errors", &s.Errors},
	} {
		v, err := r.uint(f.name, 64)
		if err != nil {
			return ErrHoldStatus{}, err
		}
		*f.dst = v
	}
	if err := r.done(); err != nil {
		return ErrHoldStatus{}, err
	}
	return s, nil
}
