// SPDX-License-Identifier: Apache-2.0

//go:build linux

package engine

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// lateDisks is fileDisks whose list can grow while a wait runs, as disks
// show up during a boot.
type lateDisks struct {
	fileDisks
	mu    sync.Mutex
	shown []string
}

func (d *lateDisks) list() ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.shown), nil
}

func (d *lateDisks) show(paths ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.shown = append(d.shown, paths...)
}

// expectedOnDisk reads the expected pools file.
func expectedOnDisk(t *testing.T, e *Engine) []expectedPool {
	t.Helper()
	b, err := os.ReadFile(e.cfg.ExpectedPoolsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f expectedPools
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v\n%s", e.cfg.ExpectedPoolsFile, err, b)
	}
	return f.Pools
}

// TestWaitForDevices checks the wait of boot assembly: every layout
// written lists its pool in the expected pools file, a pool deleted leaves
// it; the wait ends as soon as a late SSD shows up, waits for a pool none
// of whose disks is there (known only from the file), and after its
// timeout says what is still missing.
func TestWaitForDevices(t *testing.T) {
	ctx := context.Background()
	hp := newHostPool(t)
	e := hp.e
	ssd := hp.devs.Members[hp.vol.WriteCache.Member]

	want := []expectedPool{{Name: "tank", UUID: hp.uuid, SSDs: []expectedSSD{{UUID: hp.vol.WriteCache.Member, Path: ssd}}}}
	if got := expectedOnDisk(t, e); !slicesEqualJSON(got, want) {
		t.Fatalf("expected pools after pool creation: %+v, want %+v", got, want)
	}

	tests := []struct {
		name    string
		shown   []string // at the start
		later   []string // after 300 ms
		timeout time.Duration
		missing []string
		absent  []string
	}{
		{name: "all there", shown: []string{hp.origin, ssd}, timeout: 10 * time.Second},
		{name: "SSD late", shown: []string{hp.origin}, later: []string{ssd}, timeout: 10 * time.Second},
		{name: "nothing there", timeout: time.Second,
			missing: []string{"pool tank: none of its SSDs (last seen at " + ssd + ")"}, absent: []string{"tank"}},
		{name: "SSD gone", shown: []string{hp.origin}, timeout: time.Second,
			missing: []string{"pool tank: SSD " + hp.vol.WriteCache.Member + " (last seen at " + ssd + ")"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			disks := &lateDisks{shown: slices.Clone(tt.shown)}
			e.disks = disks
			if tt.later != nil {
				timer := time.AfterFunc(300*time.Millisecond, func() { disks.show(tt.later...) })
				defer timer.Stop()
			}
			var told [][]string
			start := time.Now()
			w, err := e.WaitForDevices(ctx, tt.timeout, func(_ time.Duration, m []string) { told = append(told, m) })
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(w.Missing, tt.missing) || !slices.Equal(w.Absent, tt.absent) {
				t.Fatalf("missing %q and absent %q, want %q and %q", w.Missing, w.Absent, tt.missing, tt.absent)
			}
			switch {
			case tt.missing != nil && took < tt.timeout:
				t.Fatalf("gave up after %v, before its timeout %v", took, tt.timeout)
			case tt.missing == nil && took > 5*time.Second:
				t.Fatalf("took %v with every disk there", took)
			case tt.later != nil && (len(told) == 0 || !strings.Contains(strings.Join(told[0], ";"), "pool tank: SSD "+hp.vol.WriteCache.Member)):
				t.Fatalf("progress while the SSD was late: %q, want it named", told)
			case tt.later == nil && tt.missing == nil && len(told) != 0:
				t.Fatalf("progress %q with nothing to wait for", told)
			}
		})
	}

	e.disks = fileDisks{paths: []string{hp.origin, ssd}}
	cleanWriteTier(hp)
	if err := e.DeleteVolume(ctx, "db", false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.DeletePool(ctx, "tank"); err != nil {
		t.Fatal(err)
	}
	if got := expectedOnDisk(t, e); len(got) != 0 {
		t.Fatalf("expected pools after the pool's deletion: %+v, want none", got)
	}
	if w, err := e.WaitForDevices(ctx, time.Second, nil); err != nil || w.Missing != nil || w.Absent != nil {
		t.Fatalf("wait after the pool's deletion: %+v, %v; want nothing to wait for", w, err)
	}
}

// TestWaitForDevicesDamagedList checks that an unreadable list does not
// stop the boot: the wait goes on with the disks found.
func TestWaitForDevicesDamagedList(t *testing.T) {
	hp := newHostPool(t)
	if err := os.WriteFile(hp.e.cfg.ExpectedPoolsFile, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := hp.e.WaitForDevices(context.Background(), time.Second, nil)
	if err != nil || w.Missing != nil {
		t.Fatalf("wait with a damaged list and every disk there: %+v, %v; want nothing missing", w, err)
	}
}

func slicesEqualJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
