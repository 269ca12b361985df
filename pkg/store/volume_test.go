// SPDX-License-Identifier: Apache-2.0

package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

func dbSpec() api.VolumeSpec {
	return api.VolumeSpec{
		Name: "db", Node: "node1", Pool: "fast",
		SizeBytes: 100 << 30, WriteCacheBytes: 10 << 30, Mode: "writeback",
	}
}

func TestVolumeSpecTransactions(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)

	m1, err := s.CreateVolumeSpec(ctx, dbSpec())
	if err != nil {
		t.Fatal(err)
	}
	if m1.CreateRevision == 0 || m1.ModRevision != m1.CreateRevision || !strings.HasSuffix(m1.Key, "/volumes/db/spec") {
		t.Fatalf("create meta = %+v", m1)
	}

	// Creating twice is a conflict, even with an identical spec.
	if _, err := s.CreateVolumeSpec(ctx, dbSpec()); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `"db" already exists`) {
		t.Fatalf("second create: %v, want ErrConflict saying it exists", err)
	}

	got, meta, err := s.GetVolumeSpec(ctx, "db")
	if err != nil || got != dbSpec() || meta != m1 {
		t.Fatalf("get = %+v %+v %v, want %+v %+v", got, meta, err, dbSpec(), m1)
	}

	changed := dbSpec()
	changed.Mode = "writethrough"
	m2, err := s.UpdateVolumeSpec(ctx, changed, m1.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	if m2.CreateRevision != m1.CreateRevision || m2.ModRevision <= m1.ModRevision {
		t.Fatalf("update meta = %+v after %+v", m2, m1)
	}

	// A writer that read before the update loses.
	stale := dbSpec()
	stale.Mode = "passthrough"
	if _, err := s.UpdateVolumeSpec(ctx, stale, m1.ModRevision); !errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("stale update: %v, want ErrConflict only", err)
	}
	if err := s.DeleteVolumeSpec(ctx, "db", m1.ModRevision); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale delete: %v, want ErrConflict", err)
	}
	if got, _, _ := s.GetVolumeSpec(ctx, "db"); got.Mode != "writethrough" {
		t.Fatalf("after refused writes mode = %q, want writethrough", got.Mode)
	}

	// Revision 0 is not a wildcard for update or delete.
	if _, err := s.UpdateVolumeSpec(ctx, changed, 0); err == nil {
		t.Fatal("update with revision 0 accepted")
	}
	if err := s.DeleteVolumeSpec(ctx, "db", 0); err == nil {
		t.Fatal("delete with revision 0 accepted")
	}

	if err := s.DeleteVolumeSpec(ctx, "db", m2.ModRevision); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetVolumeSpec(ctx, "db"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after delete: %v, want ErrNotFound", err)
	}
	// Updating a deleted spec: both a conflict and not found.
	if _, err := s.UpdateVolumeSpec(ctx, changed, m2.ModRevision); !errors.Is(err, store.ErrNotFound) || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update after delete: %v, want ErrNotFound and ErrConflict", err)
	}
	// The name is free again.
	if _, err := s.CreateVolumeSpec(ctx, dbSpec()); err != nil {
		t.Fatalf("re-create: %v", err)
	}
}

func TestVolumeSpecRejectsInvalid(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)
	bad := dbSpec()
	bad.Mode = "fast"
	_, err := s.CreateVolumeSpec(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), `invalid mode "fast"`) {
		t.Fatalf("create with bad mode: %v", err)
	}
	if specs, _, _, _ := s.ListVolumeSpecs(ctx); len(specs) != 0 {
		t.Fatalf("invalid spec was stored: %+v", specs)
	}
	// A bad name given to a read is an invalid name, not "not found".
	for _, name := range []string{"", "DB", "a/b"} {
		if _, _, err := s.GetVolumeSpec(ctx, name); !errors.Is(err, pool.ErrInvalidName) {
			t.Errorf("get %q: %v, want pool.ErrInvalidName", name, err)
		}
	}
	if !errors.Is(err, pool.ErrInvalidMode) {
		t.Errorf("create with bad mode: %v, want pool.ErrInvalidMode", err)
	}
}

func TestVolumeStatusOwnership(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)
	st := api.VolumeStatus{Name: "db", Node: "node1", Mode: "writeback", State: "ready", DirtyBlocks: 7, ReadHitRatio: 0.5}

	if err := s.PutVolumeStatus(ctx, st); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("status without a spec: %v, want ErrNotFound", err)
	}

	meta, err := s.CreateVolumeSpec(ctx, dbSpec())
	if err != nil {
		t.Fatal(err)
	}
	st.ObservedRevision = meta.ModRevision
	if err := s.PutVolumeStatus(ctx, st); err != nil {
		t.Fatalf("owner's status: %v", err)
	}
	intruder := st
	intruder.Node = "node2"
	intruder.State = "stolen"
	if err := s.PutVolumeStatus(ctx, intruder); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("non-owner's status: %v, want ErrNotOwner", err)
	}

	got, _, err := s.GetVolumeStatus(ctx, "db")
	if err != nil {
		t.Fatal(err)
	}
	if got.Node != "node1" || got.State != "ready" || got.DirtyBlocks != 7 || got.ObservedRevision != meta.ModRevision || got.UpdatedAt.IsZero() {
		t.Fatalf("status = %+v", got)
	}

	// Moving the volume moves the right to write its status.
	moved := dbSpec()
	moved.Node = "node2"
	if _, err := s.UpdateVolumeSpec(ctx, moved, meta.ModRevision); err != nil {
		t.Fatal(err)
	}
	if err := s.PutVolumeStatus(ctx, st); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("old owner's status after move: %v, want ErrNotOwner", err)
	}
	if err := s.PutVolumeStatus(ctx, intruder); err != nil {
		t.Fatalf("new owner's status: %v", err)
	}

	// Deleting the spec deletes the status in the same transaction.
	_, meta, _ = s.GetVolumeSpec(ctx, "db")
	if err := s.DeleteVolumeSpec(ctx, "db", meta.ModRevision); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetVolumeStatus(ctx, "db"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("status after spec delete: %v, want ErrNotFound", err)
	}
	if err := s.PutVolumeStatus(ctx, intruder); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("status after spec delete: %v, want ErrNotFound", err)
	}
}

// Records written by hand or by another release: every kind of damage is
// reported with its key and skipped, and the good records still list.
func TestListSkipsInvalidRecords(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)
	for _, name := range []string{"a", "b"} {
		spec := dbSpec()
		spec.Name = name
		if _, err := s.CreateVolumeSpec(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	bad := []struct {
		key, value, why string
	}{
		{"volumes/notjson/spec", `{"apiVersion":`, "not a JSON record"},
		{"volumes/future/spec", `{"apiVersion":"tidecache.io/v9","kind":"VolumeSpec","spec":{"name":"future","sizeBytes":1}}`, `apiVersion "tidecache.io/v9"`},
		{"volumes/kind/spec", `{"apiVersion":"tidecache.io/v1","kind":"Policy","spec":{"name":"kind"}}`, `kind "Policy" where the key says "VolumeSpec"`},
		{"volumes/renamed/spec", `{"apiVersion":"tidecache.io/v1","kind":"VolumeSpec","spec":{"name":"other","sizeBytes":1}}`, `name "other" where the key says "renamed"`},
		{"volumes/nosize/spec", `{"apiVersion":"tidecache.io/v1","kind":"VolumeSpec","spec":{"name":"nosize"}}`, "sizeBytes must be greater than 0"},
		{"volumes/Bad_Name/spec", `{"apiVersion":"tidecache.io/v1","kind":"VolumeSpec","spec":{"name":"Bad_Name","sizeBytes":1}}`, "invalid volume name"},
		{"volumes/nospec/spec", `{"apiVersion":"tidecache.io/v1","kind":"VolumeSpec"}`, "spec: missing"},
		{"volumes/typed/spec", `{"apiVersion":"tidecache.io/v1","kind":"VolumeSpec","spec":{"name":"typed","sizeBytes":"big"}}`, "cannot unmarshal"},
		{"volumes/stray", `{}`, "volumes/<name>/spec"},
	}
	for _, b := range bad {
		if _, err := s.PutRaw(ctx, b.key, b.value); err != nil {
			t.Fatal(err)
		}
	}
	// A family this release does not know is ignored, not reported.
	if _, err := s.PutRaw(ctx, "pairings/db", `{"apiVersion":"tidecache.io/v2"}`); err != nil {
		t.Fatal(err)
	}

	specs, rev, invalid, err := s.ListVolumeSpecs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[0].Value.Name != "a" || specs[1].Value.Name != "b" || rev < specs[1].Meta.ModRevision {
		t.Fatalf("specs = %+v at %d", specs, rev)
	}
	if len(invalid) != len(bad) {
		t.Fatalf("got %d invalid records, want %d: %v", len(invalid), len(bad), invalid)
	}
	byKey := map[string]store.InvalidRecord{}
	for _, ir := range invalid {
		byKey[strings.TrimPrefix(ir.Key, s.Prefix())] = ir
	}
	for _, b := range bad {
		ir, ok := byKey[b.key]
		if !ok {
			t.Errorf("%s not reported", b.key)
			continue
		}
		if !errors.Is(ir, store.ErrInvalidRecord) || !strings.Contains(ir.Error(), b.why) {
			t.Errorf("%s: %v, want ErrInvalidRecord mentioning %q", b.key, ir, b.why)
		}
	}

	// Get of a damaged record says why, as an InvalidRecord.
	_, _, err = s.GetVolumeSpec(ctx, "future")
	var ir store.InvalidRecord
	if !errors.As(err, &ir) || !strings.HasSuffix(ir.Key, "volumes/future/spec") {
		t.Fatalf("get of invalid record: %v", err)
	}
}

// TestOneVolumePerSharedOrigin: a shared origin is cached by one volume at
// most. Two volumes over one export, on two nodes, would each write back
// what the other's cache never saw; before the origin claims, the store
// took the second spec (tidectl volume adopt --shared-origin twice).
func TestOneVolumePerSharedOrigin(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t)
	on := func(name, export string) api.VolumeSpec {
		return api.VolumeSpec{Name: name, Node: "a", WriteCacheBytes: 1 << 30, Mode: "writeback", Protect: "peer",
			SharedOrigin: &api.SharedOrigin{Node: "san", Export: export}}
	}
	claim := func(export string) string {
		t.Helper()
		v, ok, err := s.GetRaw(ctx, "originclaims/san/"+export)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return "(none)"
		}
		return v
	}
	taken := func(err error, holder string) {
		t.Helper()
		if !errors.Is(err, store.ErrOriginTaken) || errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), `cached by volume "`+holder+`"`) {
			t.Fatalf("create on a taken origin: %v, want ErrOriginTaken naming volume %s", err, holder)
		}
	}

	dbMeta, err := s.CreateVolumeSpec(ctx, on("db", "lun0"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateVolumeSpec(ctx, on("db2", "lun0"))
	taken(err, "db")
	if got := claim("lun0"); got != "db" {
		t.Fatalf("claim of lun0 = %s, want db", got)
	}
	if _, _, err := s.GetVolumeSpec(ctx, "db2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused spec stored: %v", err)
	}
	// The same name again is a plain conflict, as for any spec.
	if _, err := s.CreateVolumeSpec(ctx, on("db", "lun0")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("create db twice: %v, want ErrConflict", err)
	}
	// Another export of the same node is another origin.
	if _, err := s.CreateVolumeSpec(ctx, on("logs", "lun1")); err != nil {
		t.Fatal(err)
	}

	// Racing creators: exactly one gets the origin.
	const racers = 6
	errs := make(chan error, racers)
	for i := range racers {
		go func() {
			_, err := s.CreateVolumeSpec(ctx, on(fmt.Sprintf("race%d", i), "lun2"))
			errs <- err
		}()
	}
	won := 0
	for range racers {
		switch err := <-errs; {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrOriginTaken):
			t.Errorf("racer: %v, want success or ErrOriginTaken", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d racers got lun2, want exactly 1", won)
	}

	// Deleting the volume frees its origin.
	if err := s.DeleteVolumeSpec(ctx, "db", dbMeta.ModRevision); err != nil {
		t.Fatal(err)
	}
	if got := claim("lun0"); got != "(none)" {
		t.Fatalf("claim of lun0 after db's deletion = %s, want none", got)
	}
	if _, err := s.CreateVolumeSpec(ctx, on("db2", "lun0")); err != nil {
		t.Fatalf("create on a freed origin: %v", err)
	}

	// A spec written before claims existed holds its origin all the same.
	if _, err := s.CreateVolumeSpec(ctx, on("legacy", "lun3")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePrefix(ctx, "originclaims/san/lun3"); err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateVolumeSpec(ctx, on("new", "lun3"))
	taken(err, "legacy")
	// Whatever else a spec says of the export: a CSI claim's is marked
	// provisioned, and the same export all the same.
	provisioned := on("claim", "lun3")
	provisioned.SharedOrigin.Provisioned = true
	_, err = s.CreateVolumeSpec(ctx, provisioned)
	taken(err, "legacy")

	// A claim whose volume is gone (left by a release without claims
	// deleting its spec) does not hold the origin.
	if _, err := s.PutRaw(ctx, "originclaims/san/lun4", "ghost"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateVolumeSpec(ctx, on("fresh", "lun4")); err != nil {
		t.Fatalf("create over a stale claim: %v", err)
	}
	if got := claim("lun4"); got != "fresh" {
		t.Fatalf("claim of lun4 = %s, want fresh", got)
	}
	// Deleting a volume leaves another volume's claim alone.
	if _, err := s.PutRaw(ctx, "originclaims/san/lun1", "someone-else"); err != nil {
		t.Fatal(err)
	}
	_, logsMeta, err := s.GetVolumeSpec(ctx, "logs")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVolumeSpec(ctx, "logs", logsMeta.ModRevision); err != nil {
		t.Fatal(err)
	}
	if got := claim("lun1"); got != "someone-else" {
		t.Fatalf("claim of lun1 after deleting logs = %s, want someone-else's left", got)
	}
}
