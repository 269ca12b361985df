// SPDX-License-Identifier: Apache-2.0

package dm

// FUAFlushTarget is the target type of tidecache's own dm target
// (kernel/dm-fuaflush). It passes every bio through to one device and
// completes a REQ_FUA write only after the write and then an empty flush
// sent to that device have completed. Stacked on dm-writecache it makes
// FUA writes durable: dm-writecache in SSD mode commits its metadata on a
// flush but not on FUA.
const FUAFlushTarget = "fuaflush"

// FUAFlushModule is the kernel module that provides FUAFlushTarget.
const FUAFlushModule = "dm-fuaflush"

// FUAFlushParams are the constructor parameters of a fuaflush target.
type FUAFlushParams struct {
	Device string // path or "major:minor"
}

// String returns "<dev>", the form the kernel prints in the table.
func (p FUAFlushParams) String() string { return p.Device }

// Target returns a fuaflush target mapping [start, start+length) onto
// the same sectors of Device.
func (p FUAFlushParams) Target(start, length uint64) Target {
	return Target{Start: start, Length: length, Type: FUAFlushTarget, Params: p.String()}
}

// Equivalent reports whether p and o pass through to the same device once
// canon has resolved both device references.
func (p FUAFlushParams) Equivalent(o FUAFlushParams, canon DeviceCanon) (bool, error) {
	if err := canonDevices(canon, &p.Device, &o.Device); err != nil {
		return false, err
	}
	return p == o, nil
}

// Validate checks the parameters before they reach the kernel.
func (p FUAFlushParams) Validate() error {
	return validateDevice("fuaflush params", "device", p.Device)
}

// ParseFUAFlushParams parses the parameters of a fuaflush target.
//
// Grammar (kernel/dm-fuaflush/dm-fuaflush.c, fuaflush_ctr):
//
//	<dev path>
//
//	dev path: the device below, a path or major:minor; sector s of the
//	          target is sector s of the device
func ParseFUAFlushParams(s string) (FUAFlushParams, error) {
	r := newArgReader("fuaflush params", s)
	var p FUAFlushParams
	var err error
	if p.Device, err = r.next("device"); err != nil {
		return FUAFlushParams{}, err
	}
	if err := r.done(); err != nil {
		return FUAFlushParams{}, err
	}
	return p, nil
}

// FUAFlushStatus is the status of a fuaflush target.
type FUAFlushStatus struct {
	// FUAWrites counts the REQ_FUA writes the target held for a flush.
	FUAWrites uint64 `json:"fua_writes"`
	// Flushes counts the flushes the target sent down for them; fewer
	// than FUAWrites when concurrent FUA writes shared one.
	Flushes uint64 `json:"flushes"`
	// FlushErrors counts flushes that failed; each failed the FUA writes
	// that waited for it.
	FlushErrors uint64 `json:"flush_errors"`
}

// ParseFUAFlushStatus parses the status of a fuaflush target:
//
//	<fua writes> <flushes> <flush errors>
func ParseFUAFlushStatus(params string) (FUAFlushStatus, error) {
	r := newArgReader("fuaflush status", params)
	var s FUAFlushStatus
	for _, f := range []struct {
		name string
		dst  *uint64
	}{
		{"fua writes", &s.FUAWrites},
		{"flushes", &s.Flushes},
		{"flush errors", &s.FlushErrors},
	} {
		v, err := r.uint(f.name, 64)
		if err != nil {
			return FUAFlushStatus{}, err
		}
		*f.dst = v
	}
	if err := r.done(); err != nil {
		return FUAFlushStatus{}, err
	}
	return s, nil
}
