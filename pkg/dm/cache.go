// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// dm-cache block size limits in sectors (drivers/md/dm-cache-target.c).
const (
	cacheMinBlockSize = 64      // 32 KiB
	cacheMaxBlockSize = 2097152 // 1 GiB
)

// CacheParams are the constructor parameters of a dm-cache target.
type CacheParams struct {
	Metadata, Cache, Origin string   // path or "major:minor"
	BlockSize               uint64   // sectors
	Features                []string // "writeback" | "writethrough" | "passthrough", "metadata2", "no_discard_passdown"
	Policy                  string   // "smq", "mq", "cleaner", "default"; empty prints as "default"
	PolicyArgs              []string // key value pairs, flattened: "migration_threshold", "2048"
}

// String returns
//
//	<meta> <cache> <origin> <block size> <#features> <features...>
//	<policy> <#policy args> <policy args...>
//
// which is also how the kernel prints the table (it repeats the
// constructor arguments after the three devices).
func (p CacheParams) String() string {
	policy := p.Policy
	if policy == "" {
		policy = "default"
	}
	f := []string{p.Metadata, p.Cache, p.Origin, utoa(p.BlockSize), strconv.Itoa(len(p.Features))}
	f = append(f, p.Features...)
	f = append(f, policy, strconv.Itoa(len(p.PolicyArgs)))
	f = append(f, p.PolicyArgs...)
	return strings.Join(f, " ")
}

// Target returns a "cache" target over [start, start+length).
func (p CacheParams) Target(start, length uint64) Target {
	return Target{Start: start, Length: length, Type: "cache", Params: p.String()}
}

// Equivalent reports whether p and o build the same cache once canon has
// resolved the device references. Features compare as a set: the kernel
// prints them in its own order.
func (p CacheParams) Equivalent(o CacheParams, canon DeviceCanon) (bool, error) {
	if err := canonDevices(canon, &p.Metadata, &p.Cache, &p.Origin, &o.Metadata, &o.Cache, &o.Origin); err != nil {
		return false, err
	}
	pf, of := slices.Sorted(slices.Values(p.Features)), slices.Sorted(slices.Values(o.Features))
	return p.Metadata == o.Metadata && p.Cache == o.Cache && p.Origin == o.Origin &&
		p.BlockSize == o.BlockSize && slices.Equal(pf, of) &&
		p.Policy == o.Policy && slices.Equal(p.PolicyArgs, o.PolicyArgs), nil
}

// ParseCacheParams parses the parameters of a cache target.
//
// Grammar (drivers/md/dm-cache-target.c, parse_cache_args;
// Documentation/admin-guide/device-mapper/cache.rst):
//
//	<metadata dev> <cache dev> <origin dev> <block size>
//	<#feature args> [<feature arg>]*
//	<policy> <#policy args> [<policy arg>]*
//
//	block size:   sectors, a multiple of 64 from 64 (32 KiB) to 2097152 (1 GiB)
//	feature arg:  writeback | writethrough | passthrough | metadata2
//	            | no_discard_passdown
//	policy:       smq | mq | cleaner | default
//	policy arg:   <key> <value> pairs, e.g. migration_threshold 2048
func ParseCacheParams(s string) (CacheParams, error) {
	r := newArgReader("cache params", s)
	var p CacheParams
	var err error
	if p.Metadata, err = r.next("metadata device"); err != nil {
		return CacheParams{}, err
	}
	if p.Cache, err = r.next("cache device"); err != nil {
		return CacheParams{}, err
	}
	if p.Origin, err = r.next("origin device"); err != nil {
		return CacheParams{}, err
	}
	if p.BlockSize, err = r.uint("block size", 64); err != nil {
		return CacheParams{}, err
	}
	n, err := r.count("feature count")
	if err != nil {
		return CacheParams{}, err
	}
	p.Features = r.group(n)
	if p.Policy, err = r.next("policy"); err != nil {
		return CacheParams{}, err
	}
	if n, err = r.count("policy argument count"); err != nil {
		return CacheParams{}, err
	}
	p.PolicyArgs = r.group(n)
	if err := r.done(); err != nil {
		return CacheParams{}, err
	}
	return p, nil
}

// Validate checks what the dm-cache constructor enforces: devices, block
// size, known features with at most one I/O mode, and policy arguments in
// key/value pairs.
func (p CacheParams) Validate() error {
	const what = "cache params"
	for _, d := range []struct{ arg, v string }{{"metadata device", p.Metadata}, {"cache device", p.Cache}, {"origin device", p.Origin}} {
		if err := validateDevice(what, d.arg, d.v); err != nil {
			return err
		}
	}
	if bs := p.BlockSize; bs < cacheMinBlockSize || bs > cacheMaxBlockSize || bs%cacheMinBlockSize != 0 {
		return fmt.Errorf("%s: block size %d sectors: want a multiple of %d from %d to %d", what, bs, cacheMinBlockSize, cacheMinBlockSize, cacheMaxBlockSize)
	}
	modes := 0
	for _, f := range p.Features {
		switch f {
		case "writeback", "writethrough", "passthrough":
			modes++
		case "metadata2", "no_discard_passdown":
		default:
			return fmt.Errorf("%s: feature %q: unknown", what, f)
		}
	}
	if modes > 1 {
		return fmt.Errorf("%s: features %q: more than one I/O mode", what, p.Features)
	}
	if strings.ContainsAny(p.Policy, " \t\n\x00") {
		return fmt.Errorf("%s: policy %q: contains whitespace", what, p.Policy)
	}
	if len(p.PolicyArgs)%2 != 0 {
		return fmt.Errorf("%s: policy arguments %q: want key value pairs", what, p.PolicyArgs)
	}
	for _, a := range append(append([]string(nil), p.Features...), p.PolicyArgs...) {
		if a == "" || strings.ContainsAny(a, " \t\n\x00") {
			return fmt.Errorf("%s: argument %q: empty or contains whitespace", what, a)
		}
	}
	return nil
}

// CacheStatus is the status line of a dm-cache target.
type CacheStatus struct {
	MetadataBlockSize uint64   `json:"metadata_block_size"` // sectors
	MetadataUsed      uint64   `json:"metadata_used"`       // metadata blocks
	MetadataTotal     uint64   `json:"metadata_total"`
	BlockSize         uint64   `json:"block_size"` // sectors
	Used              uint64   `json:"used"`       // cache blocks
	Total             uint64   `json:"total"`
	ReadHits          uint64   `json:"read_hits"`
	ReadMisses        uint64   `json:"read_misses"`
	WriteHits         uint64   `json:"write_hits"`
	WriteMisses       uint64   `json:"write_misses"`
	Demotions         uint64   `json:"demotions"`
	Promotions        uint64   `json:"promotions"`
	Dirty             uint64   `json:"dirty"` // cache blocks
	Features          []string `json:"features"`
	CoreArgs          []string `json:"core_args"` // key value pairs, e.g. migration_threshold 2048
	Policy            string   `json:"policy"`
	PolicyArgs        []string `json:"policy_args"`
	MetadataMode      string   `json:"metadata_mode"` // "rw" or "ro"; empty if the target did not print it
	NeedsCheck        bool     `json:"needs_check"`
	// Failed: the cache is in fail mode and printed only "Fail"; every
	// other field is zero.
	Failed bool `json:"failed"`
}

// ParseCacheStatus parses the status text of a cache target. v is the cache
// target version: from 2.0.0 the metadata mode and needs_check fields are
// required; older or unknown (zero) versions may omit them.
//
// Grammar (drivers/md/dm-cache-target.c, cache_status, STATUSTYPE_INFO):
//
//	Fail
//	| <metadata block size> <#used metadata blocks>/<#total metadata blocks>
//	  <cache block size> <#used cache blocks>/<#total cache blocks>
//	  <#read hits> <#read misses> <#write hits> <#write misses>
//	  <#demotions> <#promotions> <#dirty>
//	  <#features> <features>*
//	  <#core args> <core args>*
//	  <policy name> <#policy args> <policy args>*
//	  <cache metadata mode: rw|ro> <needs_check|->
//
// The kernel prints "Error" alone when it cannot read its metadata; that
// is returned as an error.
func ParseCacheStatus(params string, v Version) (CacheStatus, error) {
	r := newArgReader("cache status", params)
	switch strings.Join(r.args, " ") {
	case "Fail":
		return CacheStatus{Failed: true}, nil
	case "Error":
		return CacheStatus{}, r.fail("status", "Error", errors.New("the kernel could not read the cache metadata"))
	}
	var s CacheStatus
	var err error
	if s.MetadataBlockSize, err = r.uint("metadata block size", 64); err != nil {
		return CacheStatus{}, err
	}
	if s.MetadataUsed, s.MetadataTotal, err = r.ratio("metadata usage"); err != nil {
		return CacheStatus{}, err
	}
	if s.BlockSize, err = r.uint("cache block size", 64); err != nil {
		return CacheStatus{}, err
	}
	if s.Used, s.Total, err = r.ratio("cache usage"); err != nil {
		return CacheStatus{}, err
	}
	for _, f := range []struct {
		name string
		dst  *uint64
	}{
		{"read hits", &s.ReadHits},
		{"read misses", &s.ReadMisses},
		{"write hits", &s.WriteHits},
		{"write misses", &s.WriteMisses},
		{"demotions", &s.Demotions},
		{"promotions", &s.Promotions},
		{"dirty", &s.Dirty},
	} {
		if *f.dst, err = r.uint(f.name, 64); err != nil {
			return CacheStatus{}, err
		}
	}
	n, err := r.count("feature count")
	if err != nil {
		return CacheStatus{}, err
	}
	s.Features = r.group(n)
	if n, err = r.count("core argument count"); err != nil {
		return CacheStatus{}, err
	}
	s.CoreArgs = r.group(n)
	if s.Policy, err = r.next("policy"); err != nil {
		return CacheStatus{}, err
	}
	if n, err = r.count("policy argument count"); err != nil {
		return CacheStatus{}, err
	}
	s.PolicyArgs = r.group(n)

	if r.remaining() == 0 && !v.AtLeast(Version{2, 0, 0}) {
		return s, nil
	}
	mode, err := r.next("metadata mode")
	if err != nil {
		return CacheStatus{}, err
	}
	if mode != "rw" && mode != "ro" {
		return CacheStatus{}, r.fail("metadata mode", mode, errors.New("want rw or ro"))
	}
	s.MetadataMode = mode
	if r.remaining() == 0 && !v.AtLeast(Version{2, 0, 0}) {
		return s, nil
	}
	check, err := r.next("needs_check")
	if err != nil {
		return CacheStatus{}, err
	}
	switch check {
	case "needs_check":
		s.NeedsCheck = true
	case "-":
	default:
		return CacheStatus{}, r.fail("needs_check", check, errors.New("want needs_check or -"))
	}
	if err := r.done(); err != nil {
		return CacheStatus{}, err
	}
	return s, nil
}
