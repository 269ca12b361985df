// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// RaidTarget is the target type of dm-raid, device-mapper's bridge to the
// md RAID personalities. tidecache uses its raid1 to mirror a write cache
// over two SSD slices: the mirror lives in a dm table like the rest of the
// stack, and its superblocks and write-intent bitmap are on metadata
// slices only dm-raid reads (an md superblock on a slice would be picked
// up by mdadm's udev rules on whichever node sees the slice).
const RaidTarget = "raid"

// RaidModule is the kernel module that provides RaidTarget.
const RaidModule = "dm-raid"

// MissingLeg stands for an absent metadata or data device in a raid table:
// the array runs degraded without that leg.
const MissingLeg = "-"

// RaidLeg is one mirror leg: its metadata device (dm-raid superblock and
// bitmap) and its data device, each a path, "major:minor" or MissingLeg.
type RaidLeg struct {
	Meta, Data string
}

// Raid1Params are the constructor parameters of a dm-raid raid1 target.
type Raid1Params struct {
	Legs []RaidLeg
	// Rebuild lists legs to copy in full from the others when the table
	// is loaded (a new leg replacing a dead one). It is an instruction,
	// not state: Equivalent ignores it.
	Rebuild []int
	// MinRecoveryRate, in KiB/s per leg, is the speed below which md does
	// not throttle a resync or rebuild for the sake of other I/O (0: the
	// node's /proc/sys/dev/raid/speed_limit_min, 1000 by default). A
	// tuning, not a layout: Equivalent ignores it.
	MinRecoveryRate uint64
	// WriteMostly lists legs md writes to but reads from only when no
	// other in-sync leg holds the block: a leg on a peer's SSD, reached
	// over the network, so that reads of cached data stay on this node's
	// own SSD while both legs are in sync. Writes still go to every leg
	// before they complete (no max_write_behind). A tuning of reads, not
	// a layout: Equivalent ignores it, so a running mirror loaded without
	// it is not reloaded (a suspend of the volume) for it, and takes it
	// with its next table.
	WriteMostly []int
}

// String returns the table parameters:
//
//	raid1 <#params> 0 [rebuild <idx>]... [min_recovery_rate <KiB/s>] [write_mostly <idx>]... <#legs> <meta0> <data0> ...
//
// The 0 is the chunk size, which raid1 takes and ignores. The keys come in
// the order the kernel prints them back (dm-raid's raid_status).
func (p Raid1Params) String() string {
	params := []string{"0"}
	for _, i := range p.Rebuild {
		params = append(params, "rebuild", utoa(uint64(i)))
	}
	if p.MinRecoveryRate > 0 {
		params = append(params, "min_recovery_rate", utoa(p.MinRecoveryRate))
	}
	for _, i := range p.WriteMostly {
		params = append(params, "write_mostly", utoa(uint64(i)))
	}
	out := []string{"raid1", utoa(uint64(len(params)))}
	out = append(out, params...)
	out = append(out, utoa(uint64(len(p.Legs))))
	for _, l := range p.Legs {
		out = append(out, l.Meta, l.Data)
	}
	return strings.Join(out, " ")
}

// Target returns a raid target mapping [start, start+length) onto the
// mirror.
func (p Raid1Params) Target(start, length uint64) Target {
	return Target{Start: start, Length: length, Type: RaidTarget, Params: p.String()}
}

// Equivalent reports whether p and o mirror the same legs once canon has
// resolved every device reference; rebuild instructions are ignored.
func (p Raid1Params) Equivalent(o Raid1Params, canon DeviceCanon) (bool, error) {
	if len(p.Legs) != len(o.Legs) {
		return false, nil
	}
	resolve := func(ref string) (string, error) {
		if ref == MissingLeg {
			return ref, nil
		}
		return canon(ref)
	}
	for i := range p.Legs {
		a, b := p.Legs[i], o.Legs[i]
		if err := canonDevices(resolve, &a.Meta, &a.Data, &b.Meta, &b.Data); err != nil {
			return false, err
		}
		if a != b {
			return false, nil
		}
	}
	return true, nil
}

// Validate checks the parameters before they reach the kernel.
func (p Raid1Params) Validate() error {
	if len(p.Legs) < 2 {
		return fmt.Errorf("raid1 params: %d leg(s), want at least 2", len(p.Legs))
	}
	present := 0
	for i, l := range p.Legs {
		if (l.Meta == MissingLeg) != (l.Data == MissingLeg) {
			return fmt.Errorf("raid1 params: leg %d: metadata and data must both be present or both be %q", i, MissingLeg)
		}
		if l.Data == MissingLeg {
			continue
		}
		present++
		if err := validateDevice("raid1 params", fmt.Sprintf("leg %d meta", i), l.Meta); err != nil {
			return err
		}
		if err := validateDevice("raid1 params", fmt.Sprintf("leg %d data", i), l.Data); err != nil {
			return err
		}
	}
	if present == 0 {
		return errors.New("raid1 params: every leg is missing")
	}
	for _, i := range p.Rebuild {
		if i < 0 || i >= len(p.Legs) || p.Legs[i].Data == MissingLeg {
			return fmt.Errorf("raid1 params: rebuild of leg %d, which is not a present leg", i)
		}
	}
	for n, i := range p.WriteMostly {
		switch {
		case i < 0 || i >= len(p.Legs) || p.Legs[i].Data == MissingLeg:
			return fmt.Errorf("raid1 params: write_mostly on leg %d, which is not a present leg", i)
		case slices.Contains(p.WriteMostly[:n], i):
			return fmt.Errorf("raid1 params: write_mostly on leg %d given twice", i)
		}
	}
	// md would have no leg to read from by preference; the kernel refuses
	// a table whose every leg is write-mostly.
	if len(p.WriteMostly) > 0 && len(p.WriteMostly) == present {
		return errors.New("raid1 params: every present leg is write_mostly; reads need one that is not")
	}
	return nil
}

// WithoutLeg returns the parameters with leg i missing ("- -"): the
// mirror runs degraded without it, and no instruction or tuning names it.
// When only write-mostly legs remain, none is: md reads from them anyway.
func (p Raid1Params) WithoutLeg(i int) Raid1Params {
	q := p
	q.Legs = slices.Clone(p.Legs)
	q.Legs[i] = RaidLeg{Meta: MissingLeg, Data: MissingLeg}
	gone := func(j int) bool { return j == i }
	q.Rebuild = slices.DeleteFunc(slices.Clone(p.Rebuild), gone)
	q.WriteMostly = slices.DeleteFunc(slices.Clone(p.WriteMostly), gone)
	for j, l := range q.Legs {
		if l.Data != MissingLeg && !slices.Contains(q.WriteMostly, j) {
			return q
		}
	}
	q.WriteMostly = nil
	return q
}

// ParseRaid1Params parses the parameters of a raid target of type raid1,
// as loaded or as the kernel prints them back.
//
// Grammar (drivers/md/dm-raid.c, raid_ctr and raid_status):
//
//	raid1 <#raid params> <chunk size> [<key> [<value>]]... <#legs> (<meta> <data>)...
//
// Keys without a value: sync, nosync, raid10_use_near_sets; every other key
// takes one. rebuild, min_recovery_rate and write_mostly are kept; the
// other keys are tolerated and dropped.
func ParseRaid1Params(s string) (Raid1Params, error) {
	r := newArgReader("raid params", s)
	kind, err := r.next("raid type")
	if err != nil {
		return Raid1Params{}, err
	}
	if kind != "raid1" {
		return Raid1Params{}, r.fail("raid type", kind, errors.New("want raid1"))
	}
	n, err := r.count("#raid params")
	if err != nil {
		return Raid1Params{}, err
	}
	o := r.sub(n)
	if _, err := o.uint("chunk size", 32); err != nil {
		return Raid1Params{}, err
	}
	var p Raid1Params
	for o.remaining() > 0 {
		key, _ := o.next("raid param")
		switch key {
		case "sync", "nosync", "raid10_use_near_sets":
			continue
		case "write_mostly":
			// The kernel prints the leg's slot in the array, -1 once md
			// has dropped the leg (it failed): that names no leg.
			i, err := o.int(key, 32)
			if err != nil {
				return Raid1Params{}, err
			}
			if i >= 0 {
				p.WriteMostly = append(p.WriteMostly, int(i))
			}
			continue
		}
		v, err := o.uint(key, 31)
		if err != nil {
			return Raid1Params{}, err
		}
		switch key {
		case "rebuild":
			p.Rebuild = append(p.Rebuild, int(v))
		case "min_recovery_rate":
			p.MinRecoveryRate = v
		}
	}
	legs, err := r.uint("#raid devs", 16)
	if err != nil {
		return Raid1Params{}, err
	}
	for i := range int(legs) {
		var l RaidLeg
		if l.Meta, err = r.next(fmt.Sprintf("leg %d meta", i)); err != nil {
			return Raid1Params{}, err
		}
		if l.Data, err = r.next(fmt.Sprintf("leg %d data", i)); err != nil {
			return Raid1Params{}, err
		}
		p.Legs = append(p.Legs, l)
	}
	if err := r.done(); err != nil {
		return Raid1Params{}, err
	}
	return p, nil
}

// LegHealth is dm-raid's view of one leg.
type LegHealth string

// The health characters of a raid status line.
const (
	LegInSync  LegHealth = "A" // alive and in sync
	LegSyncing LegHealth = "a" // alive, being resynced or rebuilt
	LegDead    LegHealth = "D" // failed: no I/O goes to it
	LegMissing LegHealth = "-" // absent from the table
	LegJournal LegHealth = "J" // a journal device (raid4/5/6 only)
)

// RaidStatus is the status of a raid target.
type RaidStatus struct {
	Type   string      `json:"type"`
	Health []LegHealth `json:"health"`
	// SyncDone and SyncTotal are the sectors resynced or rebuilt so far
	// and in all; equal when the array is in sync.
	SyncDone  uint64 `json:"sync_done"`
	SyncTotal uint64 `json:"sync_total"`
	// SyncAction is what md is doing: idle, frozen, resync, recover,
	// check, repair or reshape.
	SyncAction string `json:"sync_action"`
	// Mismatches counts the discrepancies a check or repair found.
	Mismatches uint64 `json:"mismatches"`
}

// HealthString returns the health letters as the status line prints them
// ("AA", "AD").
func (s RaidStatus) HealthString() string {
	var b strings.Builder
	for _, h := range s.Health {
		b.WriteString(string(h))
	}
	return b.String()
}

// Copies counts the legs that hold every write the array acknowledged: the
// legs in sync, and during a resync (md's "resync" action, after creation
// or an unclean stop) also the legs being resynced, since every write
// since goes to all of them and the regions left to compare hold nothing
// the array acknowledged but did not write to both. A leg being rebuilt
// ("recover") does not count until it is done.
func (s RaidStatus) Copies() int {
	n := 0
	for _, h := range s.Health {
		if h == LegInSync || (h == LegSyncing && s.SyncAction == "resync") {
			n++
		}
	}
	return n
}

// ParseRaidStatus parses the status of a raid target:
//
//	<type> <#devs> <health chars> <sync ratio> <sync action> <mismatch count> [<data offset> [<journal char>]]
func ParseRaidStatus(params string) (RaidStatus, error) {
	r := newArgReader("raid status", params)
	var s RaidStatus
	var err error
	if s.Type, err = r.next("raid type"); err != nil {
		return RaidStatus{}, err
	}
	n, err := r.uint("#devs", 16)
	if err != nil {
		return RaidStatus{}, err
	}
	chars, err := r.next("health")
	if err != nil {
		return RaidStatus{}, err
	}
	if uint64(len(chars)) != n {
		return RaidStatus{}, r.fail("health", chars, fmt.Errorf("want %d characters", n))
	}
	for _, c := range chars {
		h := LegHealth(c)
		switch h {
		case LegInSync, LegSyncing, LegDead, LegMissing, LegJournal:
		default:
			return RaidStatus{}, r.fail("health", chars, fmt.Errorf("unknown health %q", c))
		}
		s.Health = append(s.Health, h)
	}
	if s.SyncDone, s.SyncTotal, err = r.ratio("sync ratio"); err != nil {
		return RaidStatus{}, err
	}
	if s.SyncAction, err = r.next("sync action"); err != nil {
		return RaidStatus{}, err
	}
	if s.Mismatches, err = r.uint("mismatch count", 64); err != nil {
		return RaidStatus{}, err
	}
	// The data offset and the journal character came with later target
	// versions; neither matters to raid1 here.
	if r.remaining() > 0 {
		if _, err := r.uint("data offset", 64); err != nil {
			return RaidStatus{}, err
		}
	}
	if r.remaining() > 0 {
		r.next("journal")
	}
	if err := r.done(); err != nil {
		return RaidStatus{}, err
	}
	return s, nil
}
