// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"errors"
	"fmt"
	"strings"
)

// LinearParams are the constructor parameters of a dm-linear target.
type LinearParams struct {
	Device string // path or "major:minor"
	Offset uint64 // first sector on Device
}

// String returns "<dev> <offset>", the form the kernel prints in the table.
func (p LinearParams) String() string {
	return p.Device + " " + utoa(p.Offset)
}

// Target returns a "linear" target mapping [start, start+length) onto
// Device from Offset.
func (p LinearParams) Target(start, length uint64) Target {
	return Target{Start: start, Length: length, Type: "linear", Params: p.String()}
}

// Equivalent reports whether p and o map the same sectors of the same
// device once canon has resolved both device references.
func (p LinearParams) Equivalent(o LinearParams, canon DeviceCanon) (bool, error) {
	if err := canonDevices(canon, &p.Device, &o.Device); err != nil {
		return false, err
	}
	return p == o, nil
}

// Validate checks the parameters before they reach the kernel.
func (p LinearParams) Validate() error {
	return validateDevice("linear params", "device", p.Device)
}

// ParseLinearParams parses the parameters of a linear target.
//
// Grammar (drivers/md/dm-linear.c, linear_ctr):
//
//	<dev path> <offset>
//
//	dev path: the underlying block device, a path or major:minor
//	offset:   start sector on that device (decimal, 512-byte sectors)
func ParseLinearParams(s string) (LinearParams, error) {
	return parseDeviceOffset("linear params", s)
}

// parseDeviceOffset parses "<dev path> <offset>", the parameters of the
// targets that map one device from an offset (linear, errhold).
func parseDeviceOffset(what, s string) (LinearParams, error) {
	r := newArgReader(what, s)
	var p LinearParams
	var err error
	if p.Device, err = r.next("device"); err != nil {
		return LinearParams{}, err
	}
	if p.Offset, err = r.uint("offset", 64); err != nil {
		return LinearParams{}, err
	}
	if err := r.done(); err != nil {
		return LinearParams{}, err
	}
	return p, nil
}

// ParseLinearStatus checks the status text of a linear target, which is
// always empty.
func ParseLinearStatus(params string) error {
	if s := strings.TrimSpace(params); s != "" {
		return &ParseError{What: "linear status", Arg: "status", Value: s, Err: errors.New("want empty")}
	}
	return nil
}

// validateDevice checks a device reference used in target parameters: it
// must be non-empty and contain no whitespace (the kernel splits
// parameters on blanks).
func validateDevice(what, arg, dev string) error {
	switch {
	case dev == "":
		return fmt.Errorf("%s: %s: empty", what, arg)
	case strings.ContainsAny(dev, " \t\n\r\v\f\x00"):
		return fmt.Errorf("%s: %s %q: contains whitespace or NUL", what, arg, dev)
	}
	return nil
}
