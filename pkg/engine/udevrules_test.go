// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/pool"
)

func TestAdoptedRules(t *testing.T) {
	l := &pool.Layout{Name: "fast", Volumes: []pool.Volume{
		{Name: "db", Adopted: &pool.Adopted{Path: "/dev/md/data", MDUUID: "38e3556d:e523d739:5497d01f:b8c94f66", SizeSectors: 8}},
		{Name: "logs", Adopted: &pool.Adopted{Path: "/dev/sdb1", PartUUID: "5b1c-01", WWN: "naa.5000c500a1b2c3d4", SizeSectors: 8}},
		{Name: "lun", Adopted: &pool.Adopted{Path: "/dev/sdc", WWN: "naa.600a098038303053", Serial: "S1", SizeSectors: 8}},
		{Name: "usb", Adopted: &pool.Adopted{Path: "/dev/sdd", Serial: "WD-123", SizeSectors: 8}},
		{Name: "carved"},
	}}
	rules := string(adoptedRules(adoptedEntries([]*pool.Layout{l})))
	for _, want := range []string{
		`ENV{MD_UUID}=="38e3556d:e523d739:5497d01f:b8c94f66", ENV{TIDECACHE_ADOPTED}="fast/db"`,
		// A partition by its entry UUID, not its disk's WWN, which its
		// sibling partitions share.
		`ENV{ID_PART_ENTRY_UUID}=="5b1c-01", ENV{TIDECACHE_ADOPTED}="fast/logs"`,
		`ATTRS{wwid}=="naa.600a098038303053", ENV{TIDECACHE_ADOPTED}="fast/lun"`,
		`ATTRS{serial}=="WD-123", ENV{TIDECACHE_ADOPTED}="fast/usb"`,
		`SYMLINK="%c"`,
		`ENV{UDISKS_IGNORE}="1"`,
		`case $$l in disk/by-uuid/*|disk/by-label/*|disk/by-partuuid/*|disk/by-partlabel/*) ;; *) echo $$l ;;`,
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("rules lack %s:\n%s", want, rules)
		}
	}
	// A double quote inside a value would end it.
	for _, line := range strings.Split(rules, "\n") {
		if rest, ok := strings.CutPrefix(line, "PROGRAM=\""); ok && strings.Index(rest, "\"") != strings.Index(rest, "\", SYMLINK") {
			t.Errorf("PROGRAM value holds a double quote: %s", line)
		}
	}
	if strings.Contains(rules, "carved") {
		t.Errorf("a volume carved from the origin is in the rules:\n%s", rules)
	}
	if got := adoptedRules(adoptedEntries([]*pool.Layout{{Name: "p", Volumes: []pool.Volume{{Name: "carved"}}}})); got != nil {
		t.Errorf("rules without adopted volumes: %q, want none", got)
	}
	// What is written parses back to the same entries.
	entries := adoptedEntries([]*pool.Layout{l})
	if back := parseAdoptedEntries([]byte(rules)); !maps.Equal(back, entries) {
		t.Errorf("parsed back %v, want %v", back, entries)
	}
}

func TestSyncAdoptedRules(t *testing.T) {
	e, _ := newFakeDMEngine(t, 0)
	e.udevControl = filepath.Join(t.TempDir(), "no-udevd")
	ctx := context.Background()
	path := filepath.Join(e.cfg.UdevRulesDir, AdoptedRulesFile)
	fast := &pool.Layout{Name: "fast", Volumes: []pool.Volume{{Name: "db", Adopted: &pool.Adopted{MDUUID: "a:b:c:d", SizeSectors: 8}}}}
	slow := &pool.Layout{Name: "slow", Volumes: []pool.Volume{{Name: "logs", Adopted: &pool.Adopted{PartUUID: "p-1", SizeSectors: 8}}}}
	read := func() string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := e.syncAdoptedRules(ctx, []*pool.Layout{fast, slow}, ""); err != nil {
		t.Fatal(err)
	}
	if got := read(); !strings.Contains(got, `ENV{MD_UUID}=="a:b:c:d"`) || !strings.Contains(got, `"slow/logs"`) {
		t.Fatalf("rules file after adopt:\n%s", got)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("rules file mode: %v, %v", fi.Mode(), err)
	}
	// A boot where pool slow's SSD is missing: its device keeps its entry.
	if err := e.syncAdoptedRules(ctx, []*pool.Layout{fast}, ""); err != nil {
		t.Fatal(err)
	}
	if got := read(); !strings.Contains(got, `"slow/logs"`) {
		t.Errorf("an entry left when its pool was not found:\n%s", got)
	}
	// Detach drops its entry alone.
	if err := e.syncAdoptedRules(ctx, []*pool.Layout{{Name: "fast"}}, "fast/db"); err != nil {
		t.Fatal(err)
	}
	if got := read(); strings.Contains(got, `"fast/db"`) || !strings.Contains(got, `"slow/logs"`) {
		t.Errorf("after detaching fast/db:\n%s", got)
	}
	// The last detach removes the file.
	if err := e.syncAdoptedRules(ctx, []*pool.Layout{{Name: "slow"}}, "slow/logs"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("rules file after the last detach: %v, want it removed", err)
	}
	if entries, _ := os.ReadDir(e.cfg.UdevRulesDir); len(entries) != 0 {
		t.Errorf("files left in the rules directory: %v", entries)
	}
}
