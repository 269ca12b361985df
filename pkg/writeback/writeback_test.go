// SPDX-License-Identifier: Apache-2.0

package writeback

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSysfs writes files under <root>/class/block/<kname>/ (path -> content).
func fakeSysfs(t *testing.T, kname string, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "class", "block", kname)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestProbeAndLimit(t *testing.T) {
	tests := []struct {
		name      string
		kname     string
		files     map[string]string
		want      Origin
		wantJobs  uint64
		reasonHas string
	}{
		{
			name:  "raid10 of 4 HDDs, default near=2 layout",
			kname: "md127",
			files: map[string]string{"queue/rotational": "1", "md/level": "raid10", "md/raid_disks": "4", "md/layout": "258"},
			want:  Origin{Device: "md127", Level: "raid10", Disks: 4, IOsPerBlock: 2, Rotational: true},
			// 4 disks × 8 I/Os / 2 copies.
			wantJobs:  16,
			reasonHas: "raid10 of 4 rotating disks",
		},
		{
			name:     "raid10 of 12 HDDs",
			kname:    "md0",
			files:    map[string]string{"queue/rotational": "1", "md/level": "raid10", "md/raid_disks": "12", "md/layout": "0x102"},
			want:     Origin{Device: "md0", Level: "raid10", Disks: 12, IOsPerBlock: 2, Rotational: true},
			wantJobs: 48,
		},
		{
			name:     "raid10 with three near copies",
			kname:    "md1",
			files:    map[string]string{"queue/rotational": "1", "md/level": "raid10", "md/raid_disks": "6", "md/layout": "259"},
			want:     Origin{Device: "md1", Level: "raid10", Disks: 6, IOsPerBlock: 3, Rotational: true},
			wantJobs: 16,
		},
		{
			name:     "raid1 of 2: every block on both, floor applies",
			kname:    "md2",
			files:    map[string]string{"queue/rotational": "1", "md/level": "raid1", "md/raid_disks": "2"},
			want:     Origin{Device: "md2", Level: "raid1", Disks: 2, IOsPerBlock: 2, Rotational: true},
			wantJobs: 8,
		},
		{
			name:     "raid6 of 8: read-modify-write of two parities",
			kname:    "md3",
			files:    map[string]string{"queue/rotational": "1", "md/level": "raid6", "md/raid_disks": "8", "md/layout": "2"},
			want:     Origin{Device: "md3", Level: "raid6", Disks: 8, IOsPerBlock: 6, Rotational: true},
			wantJobs: 10,
		},
		{
			name:     "raid0 of solid-state disks",
			kname:    "md4",
			files:    map[string]string{"queue/rotational": "0", "md/level": "raid0", "md/raid_disks": "4"},
			want:     Origin{Device: "md4", Level: "raid0", Disks: 4, IOsPerBlock: 1, Rotational: false},
			wantJobs: 256,
		},
		{
			name:      "hardware RAID LUN: disks unknown",
			kname:     "sdb",
			files:     map[string]string{"queue/rotational": "1"},
			want:      Origin{Device: "sdb", IOsPerBlock: 1, Rotational: true},
			wantJobs:  16,
			reasonHas: "cannot be counted",
		},
		{
			name:     "no queue directory: assumed rotating",
			kname:    "dm-3",
			files:    map[string]string{"dm/name": "x"},
			want:     Origin{Device: "dm-3", IOsPerBlock: 1, Rotational: true},
			wantJobs: 16,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeSysfs(t, tc.kname, tc.files)
			got, err := ProbeName(root, tc.kname)
			if err != nil {
				t.Fatalf("ProbeName: %v", err)
			}
			if got != tc.want {
				t.Errorf("ProbeName = %+v, want %+v", got, tc.want)
			}
			l := got.Limit()
			if l.Jobs != tc.wantJobs || l.Source != SourceOrigin {
				t.Errorf("Limit = %d from %q, want %d from origin", l.Jobs, l.Source, tc.wantJobs)
			}
			if !strings.Contains(l.Reason, tc.kname) || !strings.Contains(l.Reason, tc.reasonHas) {
				t.Errorf("Limit reason %q does not name %s and %q", l.Reason, tc.kname, tc.reasonHas)
			}
		})
	}
}

func TestProbeErrors(t *testing.T) {
	root := fakeSysfs(t, "md9", map[string]string{"md/level": "raid10", "md/raid_disks": "four"})
	if _, err := ProbeName(root, "md9"); err == nil || !strings.Contains(err.Error(), "raid_disks") {
		t.Errorf("bad raid_disks: err = %v, want one naming md/raid_disks", err)
	}
	if _, err := ProbeName(root, "nosuch"); err == nil {
		t.Error("missing device: want an error")
	}
}
