// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Kernel limits on names (include/uapi/linux/dm-ioctl.h), not counting the
// terminating NUL.
const (
	// MaxNameLen is the longest device name the kernel accepts, in bytes.
	MaxNameLen = 127
	// MaxUUIDLen is the longest device UUID the kernel accepts, in bytes.
	MaxUUIDLen = 128
	// MaxTypeLen is the longest target type name, in bytes.
	MaxTypeLen = 15
)

// SectorSize is the unit of Target.Start and Target.Length.
const SectorSize = 512

// Target is one line of a device-mapper table. In a table read back with
// Client.Status, Params holds the target's status text instead of its
// constructor parameters.
type Target struct {
	Start, Length uint64 // in 512-byte sectors
	Type          string // "linear", "writecache", "cache", ...
	Params        string
}

// String returns the line as dmsetup prints it: "start length type params".
func (t Target) String() string {
	s := utoa(t.Start) + " " + utoa(t.Length) + " " + t.Type
	if t.Params != "" {
		s += " " + t.Params
	}
	return s
}

// DeviceCanon turns a device reference of a table, a path or
// "major:minor", into the "major:minor" form the kernel prints back.
type DeviceCanon func(ref string) (string, error)

// Equivalent reports whether t and got map the same thing: the same
// sectors, target type and parameters, ignoring what the kernel rewrites
// when it prints a table back (device paths become major:minor, options
// come in the target's own order). canon resolves device references; an
// error resolving or parsing is returned, not taken for a mismatch.
// Parameters of a target type this package does not model compare as text.
func (t Target) Equivalent(got Target, canon DeviceCanon) (bool, error) {
	if t.Start != got.Start || t.Length != got.Length || t.Type != got.Type {
		return false, nil
	}
	eq, ok := paramsEquivalence[t.Type]
	if !ok {
		return t.Params == got.Params, nil
	}
	return eq(t.Params, got.Params, canon)
}

// paramsEquivalence compares the parameters of the target types modelled
// in this package, each with the Equivalent method of its params type.
var paramsEquivalence = map[string]func(want, got string, canon DeviceCanon) (bool, error){
	"linear":        equivalentParams(ParseLinearParams, LinearParams.Equivalent),
	FUAFlushTarget:  equivalentParams(ParseFUAFlushParams, FUAFlushParams.Equivalent),
	ReadFirstTarget: equivalentParams(ParseReadFirstParams, ReadFirstParams.Equivalent),
	ErrHoldTarget:   equivalentParams(ParseErrHoldParams, ErrHoldParams.Equivalent),
	"writecache":    equivalentParams(ParseWritecacheParams, WritecacheParams.Equivalent),
	"cache":         equivalentParams(ParseCacheParams, CacheParams.Equivalent),
	RaidTarget:      equivalentParams(ParseRaid1Params, Raid1Params.Equivalent),
}

// equivalentParams parses two parameter strings with parse and compares
// them with eq.
func equivalentParams[P any](parse func(string) (P, error), eq func(P, P, DeviceCanon) (bool, error)) func(want, got string, canon DeviceCanon) (bool, error) {
	return func(want, got string, canon DeviceCanon) (bool, error) {
		w, err := parse(want)
		if err != nil {
			return false, err
		}
		g, err := parse(got)
		if err != nil {
			return false, err
		}
		return eq(w, g, canon)
	}
}

// canonDevices replaces each device reference with its canonical form.
func canonDevices(canon DeviceCanon, refs ...*string) error {
	for _, r := range refs {
		c, err := canon(*r)
		if err != nil {
			return err
		}
		*r = c
	}
	return nil
}

// Table is a device-mapper table: targets in sector order.
type Table []Target

// String returns one "start length type params" line per target, separated
// by '\n' (no trailing newline).
func (t Table) String() string {
	lines := make([]string, len(t))
	for i, tg := range t {
		lines[i] = tg.String()
	}
	return strings.Join(lines, "\n")
}

// Equivalent reports whether t and got are target by target Equivalent:
// got is typically the live table, as the kernel prints it back.
func (t Table) Equivalent(got Table, canon DeviceCanon) (bool, error) {
	if len(t) != len(got) {
		return false, nil
	}
	for i := range t {
		if eq, err := t[i].Equivalent(got[i], canon); err != nil || !eq {
			return false, err
		}
	}
	return true, nil
}

// Sectors returns the size the table maps, in 512-byte sectors.
func (t Table) Sectors() uint64 {
	if len(t) == 0 {
		return 0
	}
	last := t[len(t)-1]
	return last.Start + last.Length
}

// Validate checks what the kernel will refuse anyway, to give a clear error
// before the ioctl: at least one target, targets that start at sector 0 and
// follow each other without gaps, non-zero lengths, valid type names and
// no NUL bytes in parameters.
func (t Table) Validate() error {
	if len(t) == 0 {
		return errors.New("dm table: no targets")
	}
	var next uint64
	for i, tg := range t {
		switch {
		case tg.Start != next:
			return fmt.Errorf("dm table: target %d starts at sector %d, want %d (targets must be contiguous from 0)", i, tg.Start, next)
		case tg.Length == 0:
			return fmt.Errorf("dm table: target %d has length 0", i)
		case tg.Start+tg.Length < tg.Start:
			return fmt.Errorf("dm table: target %d overflows", i)
		case tg.Type == "" || len(tg.Type) > MaxTypeLen || strings.ContainsAny(tg.Type, " \t\n\x00"):
			return fmt.Errorf("dm table: target %d: invalid type %q (1 to %d bytes, no spaces)", i, tg.Type, MaxTypeLen)
		case strings.ContainsRune(tg.Params, 0):
			return fmt.Errorf("dm table: target %d: parameters contain a NUL byte", i)
		}
		next = tg.Start + tg.Length
	}
	return nil
}

// ParseTable parses table lines as printed by Table.String, `dmsetup table`
// or `dmsetup status`: "start length type [params...]" per line. Blank
// lines and lines starting with '#' are skipped. Params keep their inner
// spacing; leading and trailing blanks are trimmed.
func ParseTable(s string) (Table, error) {
	var t Table
	for n, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		what := "dm table line " + strconv.Itoa(n+1)
		startS, rest := cutField(line)
		lengthS, rest := cutField(rest)
		typ, rest := cutField(rest)
		if typ == "" {
			return nil, &ParseError{What: what, Arg: "line", Value: line, Err: errors.New("want <start> <length> <type> [params]")}
		}
		start, err := strconv.ParseUint(startS, 10, 64)
		if err != nil {
			return nil, &ParseError{What: what, Arg: "start", Value: startS, Err: numErr(err)}
		}
		length, err := strconv.ParseUint(lengthS, 10, 64)
		if err != nil {
			return nil, &ParseError{What: what, Arg: "length", Value: lengthS, Err: numErr(err)}
		}
		t = append(t, Target{Start: start, Length: length, Type: typ, Params: strings.TrimSpace(rest)})
	}
	return t, nil
}

// cutField splits off the first blank-separated field of s.
func cutField(s string) (field, rest string) {
	s = strings.TrimLeft(s, " \t")
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		return s[:i], s[i:]
	}
	return s, ""
}

// ValidateName checks a device name against the kernel's rules: 1 to
// MaxNameLen bytes, no '/', no NUL, and not ".", ".." or "control".
func ValidateName(name string) error {
	switch {
	case name == "":
		return errors.New("dm name: empty")
	case len(name) > MaxNameLen:
		return fmt.Errorf("dm name %q: %d bytes, max %d", name, len(name), MaxNameLen)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("dm name %q: contains '/' or NUL", name)
	case name == "." || name == ".." || name == "control":
		return fmt.Errorf("dm name %q: reserved", name)
	}
	return nil
}

// ValidateUUID checks a device UUID: at most MaxUUIDLen bytes, no NUL. An
// empty UUID is valid (the device has none).
func ValidateUUID(uuid string) error {
	switch {
	case len(uuid) > MaxUUIDLen:
		return fmt.Errorf("dm uuid %q: %d bytes, max %d", uuid, len(uuid), MaxUUIDLen)
	case strings.ContainsRune(uuid, 0):
		return fmt.Errorf("dm uuid %q: contains NUL", uuid)
	}
	return nil
}

// DevicePath returns the block device path of a dm device,
// "/dev/mapper/" + name.
func DevicePath(name string) string { return mapperDir + "/" + name }

const (
	mapperDir   = "/dev/mapper"
	controlName = "control"
)
