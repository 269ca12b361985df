// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/dm"
)

func TestTargetParams(t *testing.T) {
	tests := []struct {
		line, target, want string
		wantErr            bool
	}{
		{line: "0 2097152 cache 8 27/2048 128 4/8192 0 10 0 0 0 4 1 1 writeback 2 migration_threshold 2048 smq 0 rw -\n",
			target: "cache", want: "8 27/2048 128 4/8192 0 10 0 0 0 4 1 1 writeback 2 migration_threshold 2048 smq 0 rw -"},
		{line: "0 2097152 writecache 0 131072 131000 0", target: "cache", wantErr: true},
		{line: "", target: "cache", wantErr: true},
	}
	for _, tt := range tests {
		got, err := targetParams(tt.line, tt.target)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("targetParams(%q) = %q, %v", tt.line, got, err)
		}
	}
	// What lvmcache's flush polls must parse with the status parser.
	p, _ := targetParams(tests[0].line, "cache")
	st, err := dm.ParseCacheStatus(p, dm.Version{})
	if err != nil || st.Dirty != 1 || st.ReadMisses != 10 {
		t.Errorf("ParseCacheStatus: %+v, %v", st, err)
	}
}

func TestTidecacheVolumesFitTheirPartitions(t *testing.T) {
	for _, variants := range []bool{false, true} {
		vols := tidecacheVolumes(variants)
		names := map[string]bool{}
		for _, v := range vols {
			if names[v.name] {
				t.Errorf("volume %s twice", v.name)
			}
			names[v.name] = true
			if (v.kind == variant || v.kind == legacy) && !names[v.base] {
				t.Errorf("variant %s: base %q is not created before it", v.name, v.base)
			}
		}
		ssd := tidecacheSSDMiB(vols)
		// Each volume's write cache, each read tier with its metadata, and
		// the pool's superblocks, with room to spare.
		need := 0
		for _, v := range vols {
			need += cacheBytes >> 20
			if strings.Contains(strings.Join(v.create, " "), "--read-cache") {
				need += readTier>>20 + 8
			}
		}
		if ssd < need+4 {
			t.Errorf("variants=%v: tidecache SSD partition %d MiB, need at least %d", variants, ssd, need+4)
		}
		// Every SSD partition must fit the SSD image.
		total := ssd + cacheBytes>>20 + 16 + 2*(cacheBytes>>20) + 64 + 2 // + GPT
		if total > ssdBytes>>20 {
			t.Errorf("variants=%v: SSD partitions need %d MiB, the image has %d", variants, total, ssdBytes>>20)
		}
		hdd := volumeBytes>>20 + len(vols)*(volumeBytes>>20) + 64 + volumeBytes>>20 + 64 + 2*(volumeBytes>>20) + 64 + 2
		if raid := 2 * hddBytes >> 20; hdd > raid {
			t.Errorf("variants=%v: RAID10 partitions need %d MiB, the array has %d", variants, hdd, raid)
		}
	}
}

func TestWorkloadsAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range workloads() {
		if seen[w.key] {
			t.Errorf("workload %s twice", w.key)
		}
		seen[w.key] = true
		if _, err := w.job.InterleavedArgs([]string{"/dev/a", "/dev/b"}, 2, 1e9); err != nil {
			t.Errorf("workload %s: %v", w.key, err)
		}
		end := w.job.Offset + w.job.Size
		if end > readSet+writeSet || (w.job.RW != "randread" && w.job.RW != "read" && w.job.RW != "randrw" && w.job.Offset < readSet) {
			t.Errorf("workload %s touches [%d, %d): outside its region", w.key, w.job.Offset, end)
		}
	}
	if len(seen) != 2*len(profiles()) {
		t.Errorf("%d workloads, want every profile at QD1 and QD%d", len(seen), deepQueue)
	}
}

func TestSelectWorkloads(t *testing.T) {
	all := workloads()
	tests := []struct {
		name    string
		keys    []string
		want    []string
		wantErr bool
	}{
		{"none: all", nil, nil, false},
		{"usual order kept", []string{"rw4k-qd16", " rw4k-qd1"}, []string{"rw4k-qd1", "rw4k-qd16"}, false},
		{"unknown named", []string{"rw4k-qd1", "zz"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := selectWorkloads(all, tt.keys)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				if !strings.Contains(err.Error(), "zz") {
					t.Errorf("error does not name the unknown key: %v", err)
				}
				return
			}
			if tt.want == nil {
				if len(got) != len(all) {
					t.Errorf("%d workloads, want all %d", len(got), len(all))
				}
				return
			}
			var keys []string
			for _, w := range got {
				keys = append(keys, w.key)
			}
			if strings.Join(keys, ",") != strings.Join(tt.want, ",") {
				t.Errorf("got %v, want %v", keys, tt.want)
			}
		})
	}
}
