// SPDX-License-Identifier: Apache-2.0

package dm

import "fmt"

// ReadFirstTarget is the target type of tidecache's dm-readfirst
// (kernel/dm-readfirst). It passes every bio through to one device but
// holds the writes nobody waits for (kcopyd's write-back, background page
// cache writeback) while reads are in flight to that device, for at most
// a bound. Under dm-writecache it keeps write-back from filling the HDD
// array's queue ahead of the reads that miss the cache.
const ReadFirstTarget = "readfirst"

// ReadFirstModule is the kernel module that provides ReadFirstTarget.
const ReadFirstModule = "dm-readfirst"

// ReadFirstMaxMs is the largest hold bound and idle window the target
// accepts, in milliseconds (READFIRST_MAX_MS).
const ReadFirstMaxMs = 60000

// ReadFirstParams are the constructor parameters of a readfirst target.
type ReadFirstParams struct {
	Device string // path or "major:minor"
	// MaxHoldMs bounds how long one background write is held; 0 holds
	// nothing.
	MaxHoldMs uint64
	// IdleMs is how long reads must have been idle before held writes go.
	IdleMs uint64
}

// String returns "<dev> <max_hold_ms> <idle_ms>", the form the kernel
// prints in the table.
func (p ReadFirstParams) String() string {
	return fmt.Sprintf("%s %d %d", p.Device, p.MaxHoldMs, p.IdleMs)
}

// Target returns a readfirst target mapping [start, start+length) onto
// the same sectors of Device.
func (p ReadFirstParams) Target(start, length uint64) Target {
	return Target{Start: start, Length: length, Type: ReadFirstTarget, Params: p.String()}
}

// Equivalent reports whether p and o hold writes to the same device with
// the same bounds once canon has resolved both device references.
func (p ReadFirstParams) Equivalent(o ReadFirstParams, canon DeviceCanon) (bool, error) {
	if err := canonDevices(canon, &p.Device, &o.Device); err != nil {
		return false, err
	}
	return p == o, nil
}

// Validate checks the parameters before they reach the kernel.
func (p ReadFirstParams) Validate() error {
	if err := validateDevice("readfirst params", "device", p.Device); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    uint64
	}{{"max_hold_ms", p.MaxHoldMs}, {"idle_ms", p.IdleMs}} {
		if f.v > ReadFirstMaxMs {
			return fmt.Errorf("readfirst params: %s %d: above the target's limit of %d", f.name, f.v, ReadFirstMaxMs)
		}
	}
	return nil
}

// ParseReadFirstParams parses the parameters of a readfirst target.
//
// Grammar (kernel/dm-readfirst/dm-readfirst.c, readfirst_ctr):
//
//	<dev path> <max_hold_ms> <idle_ms>
//
//	dev path:    the device below; sector s of the target is sector s of it
//	max_hold_ms: the longest a background write is held, 0 to 60000
//	idle_ms:     how long reads must have been idle, 0 to 60000
func ParseReadFirstParams(s string) (ReadFirstParams, error) {
	r := newArgReader("readfirst params", s)
	var p ReadFirstParams
	var err error
	if p.Device, err = r.next("device"); err != nil {
		return ReadFirstParams{}, err
	}
	if p.MaxHoldMs, err = r.uint("max_hold_ms", 32); err != nil {
		return ReadFirstParams{}, err
	}
	if p.IdleMs, err = r.uint("idle_ms", 32); err != nil {
		return ReadFirstParams{}, err
	}
	if err := r.done(); err != nil {
		return ReadFirstParams{}, err
	}
	return p, nil
}

// ReadFirstStatus is the status of a readfirst target.
type ReadFirstStatus struct {
	// ReadsInFlight counts the reads sent to the device and not yet
	// completed.
	ReadsInFlight uint64 `json:"reads_in_flight"`
	// HeldNow counts the writes held right now.
	HeldNow uint64 `json:"held_now"`
	// HeldTotal counts the writes held since the table was loaded.
	HeldTotal uint64 `json:"held_total"`
	// ReleasedAtMaxHold counts held writes that went because they had
	// waited MaxHoldMs, not because reads paused: a steady read load.
	ReleasedAtMaxHold uint64 `json:"released_at_max_hold"`
	// MaxHoldMs and IdleMs are the settings in force, which a message
	// may have changed from the table's.
	MaxHoldMs uint64 `json:"max_hold_ms"`
	IdleMs    uint64 `json:"idle_ms"`
}

// ParseReadFirstStatus parses the status of a readfirst target:
//
//	<reads in flight> <held now> <held total> <released at max hold> <max_hold_ms> <idle_ms>
func ParseReadFirstStatus(params string) (ReadFirstStatus, error) {
	r := newArgReader("readfirst status", params)
	var s ReadFirstStatus
	for _, f := range []struct {
		name string
		dst  *uint64
	}{
		{"reads in flight", &s.ReadsInFlight},
		{"held now", &s.HeldNow},
		{"held total", &s.HeldTotal},
		{"released at max hold", &s.ReleasedAtMaxHold},
		{"max_hold_ms", &s.MaxHoldMs},
		{"idle_ms", &s.IdleMs},
	} {
		v, err := r.uint(f.name, 64)
		if err != nil {
			return ReadFirstStatus{}, err
		}
		*f.dst = v
	}
	if err := r.done(); err != nil {
		return ReadFirstStatus{}, err
	}
	return s, nil
}

// ReadFirstMaxHoldMessage returns the target message that sets the hold
// bound in force without a reload; 0 releases every held write and holds
// no more until the bound is set again.
func ReadFirstMaxHoldMessage(ms uint64) string {
	return fmt.Sprintf("max_hold_ms %d", ms)
}
