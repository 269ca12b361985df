// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/pool"
)

// TestDecideOriginDegraded: a degraded HDD array raises a warning that
// names the array, the failed members and the rebuild, and never changes
// the mode; the SSD rules still lower it.
func TestDecideOriginDegraded(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	spec := api.VolumeSpec{Name: "db", Node: "n1", SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20}
	failed := &Origin{Device: "/dev/md127", Members: 4, Degraded: 1, Failed: []string{"/dev/sdb"}, SyncAction: "idle", SyncProgress: -1}
	rebuilding := &Origin{Device: "/dev/md127", Members: 4, Degraded: 1, SyncAction: "recover", SyncProgress: 0.25}
	tests := []struct {
		name     string
		origin   *Origin
		wcErr    int64
		specMode string
		mode     pool.Mode
		alerts   []string
		msgHas   []string
	}{
		{"unknown origin", nil, 0, "", pool.ModeWriteback, nil, nil},
		{"healthy", &Origin{Device: "/dev/md127", Members: 4, SyncAction: "idle", SyncProgress: -1}, 0, "", pool.ModeWriteback, nil, nil},
		{"healthy, scrubbing", &Origin{Device: "/dev/md127", Members: 4, SyncAction: "check", SyncProgress: 0.5}, 0, "", pool.ModeWriteback, nil, nil},
		{"member failed, no spare", failed, 0, "", pool.ModeWriteback, []string{"warning origin_degraded"},
			[]string{"/dev/md127 degraded: 1 of 4 slots", "failed: /dev/sdb", "no rebuild running: replace the disk", "cache mode kept"}},
		{"rebuilding", rebuilding, 0, "", pool.ModeWriteback, []string{"warning origin_degraded"}, []string{"rebuild 25% done"}},
		{"recovery pending", &Origin{Device: "/dev/md127", Members: 4, Degraded: 1, SyncAction: "recover", SyncProgress: -1}, 0, "",
			pool.ModeWriteback, []string{"warning origin_degraded"}, []string{"rebuild pending"}},
		{"writethrough spec stays writethrough", failed, 0, "writethrough", pool.ModeWritethrough, []string{"warning origin_degraded"}, nil},
		{"SSD error still lowers the mode", failed, -5, "", pool.ModeWritethrough, []string{"critical ssd_error", "warning origin_degraded"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := spec
			s.Mode = tt.specMode
			d, err := Decide(Input{Spec: s, SpecRevision: 5, Policy: Builtin(),
				Facts: Facts{Now: now, Origin: tt.origin, WritecacheError: tt.wcErr}})
			if err != nil {
				t.Fatal(err)
			}
			if d.Mode != tt.mode {
				t.Errorf("mode %s, want %s (%s)", d.Mode, tt.mode, d.Reason)
			}
			var got []string
			for _, a := range d.Alerts {
				got = append(got, string(a.Severity)+" "+a.Name)
			}
			if strings.Join(got, ",") != strings.Join(tt.alerts, ",") {
				t.Errorf("alerts %v, want %v", got, tt.alerts)
			}
			all := strings.Join(d.AlertStrings(), "\n")
			for _, m := range tt.msgHas {
				if !strings.Contains(all, m) {
					t.Errorf("alerts do not say %q:\n%s", m, all)
				}
			}
			if strings.Contains(d.Reason, "origin") {
				t.Errorf("the degraded origin changed the reason for the mode: %s", d.Reason)
			}
		})
	}
}
