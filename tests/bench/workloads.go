// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
)

// The working set: every profile runs on the same regions of every
// device, both far smaller than each system's cache, so that a warm cache
// can hold all of it.
//
//	  0-128 MiB  the read set: read by the read profiles and the mixes
//	             (whose writes land here too); nothing else writes it before
//	             the mixes run, so a write-only cache holds none of it and
//	             serves its reads from the HDDs
//	128-192 MiB  the write set: the write-only profiles rewrite it
const (
	readOffset, readSet   = 0, 128 << 20
	writeOffset, writeSet = 128 << 20, 64 << 20
)

// Request-size mixes of the classic file-server and web-server access
// specifications (share of requests per size). Sizes below 4 KiB (the
// file server's 512 B-2 KiB, 20 % of its requests; the web server's,
// 45 %) run as 4 KiB: dm-writecache presents 4 KiB logical blocks, as a
// 4Kn drive does, so a 512-byte O_DIRECT request fails on tidecache and on
// lvm writecache; every system gets the same sizes so that the ratios
// compare like with like. Databases and filesystems issue no sub-4 KiB
// I/O to such devices either.
const (
	fileServerSplit = "4k/80:8k/2:16k/4:32k/4:64k/10"
	webServerSplit  = "4k/68:8k/15:16k/2:32k/6:64k/7:128k/1:512k/1"
)

// deepQueue is the "higher queue depth" of every profile.
const deepQueue = 16

// profile is an access pattern, measured at QD1 and at deepQueue.
type profile struct {
	key, label string
	job        testbed.Job // without name, device and queue depth
	// bandwidth: the figure that matters is MB/s, not IOPS.
	bandwidth bool
}

// profiles are the enterprise access patterns of drive reviews, reads
// first: the mixes write into the read set, and the read profiles should
// find none of their blocks in a write cache.
func profiles() []profile {
	read := func(rw string, bs int, split string) testbed.Job {
		return testbed.Job{RW: rw, BlockSize: bs, BlockSplit: split, Offset: readOffset, Size: readSet}
	}
	mix := func(readPct, bs int, split string) testbed.Job {
		return testbed.Job{RW: "randrw", RWMixRead: readPct, BlockSize: bs, BlockSplit: split, Offset: readOffset, Size: readSet}
	}
	write := func(rw string, bs int) testbed.Job {
		return testbed.Job{RW: rw, BlockSize: bs, Offset: writeOffset, Size: writeSet}
	}
	return []profile{
		{key: "rr4k", label: "4k random read", job: read("randread", 4096, "")},
		{key: "sr128k", label: "128k sequential read", job: read("read", 128<<10, ""), bandwidth: true},
		{key: "web", label: "web server (100 % read, 4k-512k)", job: read("randread", 4096, webServerSplit)},
		{key: "mix8k", label: "8k random 70/30 read/write", job: mix(70, 8192, "")},
		{key: "file", label: "file server (80/20, 4k-64k)", job: mix(80, 4096, fileServerSplit)},
		{key: "rw4k", label: "4k random write", job: write("randwrite", 4096)},
		{key: "sw128k", label: "128k sequential write", job: write("write", 128<<10), bandwidth: true},
	}
}

// workload is a profile at one queue depth.
type workload struct {
	key, label string
	profile    profile
	qd         int
	job        testbed.Job
}

func workloads() []workload {
	var out []workload
	for _, p := range profiles() {
		for _, qd := range []int{1, deepQueue} {
			j := p.job
			j.IODepth = qd
			j.Name = fmt.Sprintf("%s-qd%d", p.key, qd)
			out = append(out, workload{key: j.Name, label: fmt.Sprintf("%s QD%d", p.label, qd), profile: p, qd: qd, job: j})
		}
	}
	return out
}

// warmUp is the warm-up pass before any measurement: on every system it
// writes the write set once (so that the write profiles overwrite blocks a
// cache already holds, as a database rewrites its hot pages), then reads
// the read set until the system's read cache serves it. A cache that
// promotes on first access (bcache) is warm after one pass; dm-cache's smq
// promotes a block only after repeated hits, so tidecache's read tier and
// lvmcache take several. Systems without a read cache get one read pass.
func warmUp(ctx context.Context, bed *testbed.Bed, systems []*system, step, budget time.Duration) (map[string]string, error) {
	p := bed.Progress()
	notes := map[string]string{}
	for _, s := range systems {
		fill := testbed.Job{Name: "warm-write", Device: s.dev, RW: "randwrite", BlockSize: 64 << 10, IODepth: deepQueue,
			Offset: writeOffset, Size: writeSet}
		if _, err := bed.Fio(ctx, fillOnce(fill)); err != nil {
			return nil, fmt.Errorf("warm %s: %w", s.key, err)
		}
		read := testbed.Job{Name: "warm-read", Device: s.dev, RW: "randread", BlockSize: 64 << 10, IODepth: deepQueue,
			Offset: readOffset, Size: readSet, Runtime: step}
		if s.readCounters == nil {
			if _, err := bed.Fio(ctx, read); err != nil {
				return nil, fmt.Errorf("warm %s: %w", s.key, err)
			}
			continue
		}
		start := time.Now()
		h0, m0, err := s.readCounters(ctx)
		if err != nil {
			return nil, fmt.Errorf("warm %s: %w", s.key, err)
		}
		var prev float64
		for pass := 1; ; pass++ {
			if _, err := bed.Fio(ctx, read); err != nil {
				return nil, fmt.Errorf("warm %s: %w", s.key, err)
			}
			h, m, err := s.readCounters(ctx)
			if err != nil {
				return nil, fmt.Errorf("warm %s: %w", s.key, err)
			}
			d := (h - h0) + (m - m0)
			if d == 0 {
				// bcache folds its counters in on a timer: no news yet.
				p.Step("  warm-up %s pass %d: the cache's counters have not moved yet", s.key, pass)
				if time.Since(start)+step > budget {
					break
				}
				continue
			}
			ratio := float64(h-h0) / float64(d)
			h0, m0 = h, m
			p.Step("  warm-up %s pass %d: %.0f %% of reads hit the cache", s.key, pass, 100*ratio)
			notes[s.key] = fmt.Sprintf("%.0f %% read hits in the last warm-up pass (%d passes)", 100*ratio, pass)
			if ratio >= 0.98 || (pass > 2 && ratio <= prev+0.01) || time.Since(start)+step > budget {
				break
			}
			prev = ratio
		}
	}
	return notes, nil
}

// fillOnce turns a job into one pass over its region: fio without
// time_based stops when it has touched every block once.
func fillOnce(j testbed.Job) testbed.Job {
	j.Runtime = time.Hour // an upper bound; the pass ends first
	j.Once = true
	return j
}
