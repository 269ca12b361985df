// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestAddVolumeProtectLocal(t *testing.T) {
	l := testLayout(t)
	v := mustAdd(t, l, VolumeRequest{Name: "ledger", Size: 1 << 30, WriteCache: 256 << 20, Protect: ProtectLocal})
	m := v.WriteMirror
	if m == nil || v.Protection() != ProtectLocal {
		t.Fatalf("volume %+v: want a write mirror", v)
	}
	if m.Leg.Member == v.WriteCache.Member || m.Leg.Length != v.WriteCache.Length {
		t.Errorf("legs %s and %s: want equal legs on two members", v.WriteCache, m.Leg)
	}
	if m.Meta.Member != v.WriteCache.Member || m.LegMeta.Member != m.Leg.Member || m.Meta.Length != MirrorMetaSectors || m.LegMeta.Length != MirrorMetaSectors {
		t.Errorf("metadata slices %s and %s: want %d sectors next to their legs", m.Meta, m.LegMeta, MirrorMetaSectors)
	}
	// The mirror's slices count as used: a second volume goes around them.
	w := mustAdd(t, l, VolumeRequest{Name: "other", Size: 1 << 30, WriteCache: 256 << 20, Protect: ProtectLocal})
	if err := l.Validate(); err != nil {
		t.Fatalf("layout after two mirrored volumes: %v", err)
	}
	if w.WriteCache.Offset == v.WriteCache.Offset && w.WriteCache.Member == v.WriteCache.Member {
		t.Errorf("second volume's leg 0 %s on top of the first's %s", w.WriteCache, v.WriteCache)
	}
	if c := l.Clone(); c.Volumes[0].WriteMirror == l.Volumes[0].WriteMirror || !reflect.DeepEqual(c.Volumes[0].WriteMirror, l.Volumes[0].WriteMirror) {
		t.Error("Clone shares or loses the write mirror")
	}
	if plain := mustAdd(t, l, VolumeRequest{Name: "plain", Size: 1 << 30, WriteCache: 64 << 20}); plain.Protection() != ProtectNone {
		t.Errorf("volume without --protect: protection %s, want none", plain.Protection())
	}
}

func TestAddVolumeProtectLocalErrors(t *testing.T) {
	one, err := New("solo", "pool-uuid", Origin{Path: "/dev/md/tc-data", SizeSectors: 10 * gib}, []Member{{UUID: "m1", Path: "/dev/nvme0n1", SizeSectors: gib}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		l      *Layout
		req    VolumeRequest
		target error
		want   string
	}{
		{"one SSD", one, VolumeRequest{Name: "v", Size: 1 << 30, WriteCache: 64 << 20, Protect: ProtectLocal}, ErrNoSpace, "needs two SSDs in pool \"solo\", it has 1"},
		{"no write cache", testLayout(t), VolumeRequest{Name: "v", Size: 1 << 30, ReadCache: 64 << 20, Protect: ProtectLocal}, ErrInvalidRequest, "mirrors the write cache, and none was asked for"},
		{"unknown protection", testLayout(t), VolumeRequest{Name: "v", Size: 1 << 30, WriteCache: 64 << 20, Protect: "twice"}, ErrInvalidRequest, `invalid protection "twice"`},
		{"leg does not fit twice", testLayout(t), VolumeRequest{Name: "v", Size: 1 << 30, WriteCache: 1020 << 20, Protect: ProtectLocal}, ErrNoSpace, "no room for leg 0's 1 MiB metadata slice next to its data on SSD /dev/nvme0n1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.l.Generation
			_, err := tc.l.AddVolume(tc.req, "uuid-v", now)
			if !errors.Is(err, tc.target) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("AddVolume = %v, want %v containing %q", err, tc.target, tc.want)
			}
			if tc.l.Generation != before || len(tc.l.Volumes) != 0 {
				t.Error("a refused request changed the layout")
			}
		})
	}
}

func TestValidateMirror(t *testing.T) {
	cases := []struct {
		name string
		edit func(v *Volume)
		want string
	}{
		{"legs on one SSD", func(v *Volume) { v.WriteMirror.Leg.Member = v.WriteCache.Member }, "both legs of the write mirror are on member"},
		{"unequal legs", func(v *Volume) { v.WriteMirror.Leg.Length -= Alignment }, "want equal legs"},
		{"meta away from its leg", func(v *Volume) { v.WriteMirror.LegMeta.Member = v.WriteCache.Member }, "metadata slice must be on its leg's SSD"},
		{"no write cache", func(v *Volume) { v.WriteCache = nil; v.Mode = ModeWritethrough }, "write mirror without a write cache"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := testLayout(t)
			mustAdd(t, l, VolumeRequest{Name: "ledger", Size: 1 << 30, WriteCache: 256 << 20, Protect: ProtectLocal})
			tc.edit(&l.Volumes[0])
			if err := l.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestSetMirrorOutOfSync(t *testing.T) {
	l := testLayout(t)
	mustAdd(t, l, VolumeRequest{Name: "ledger", Size: 1 << 30, WriteCache: 256 << 20, Protect: ProtectLocal})
	mustAdd(t, l, VolumeRequest{Name: "plain", Size: 1 << 30, WriteCache: 64 << 20, Protect: ProtectNone})
	gen := l.Generation
	steps := []struct {
		legs    []int
		changed bool
		want    []int
	}{
		{[]int{1}, true, []int{1}},
		{[]int{1, 1}, false, []int{1}},
		{nil, true, nil},
		{[]int{}, false, nil},
	}
	for _, s := range steps {
		changed, err := l.SetMirrorOutOfSync("ledger", s.legs)
		if err != nil || changed != s.changed {
			t.Fatalf("SetMirrorOutOfSync(%v) = %v, %v; want %v", s.legs, changed, err, s.changed)
		}
		if changed {
			gen++
		}
		v, _ := l.Volume("ledger")
		if !reflect.DeepEqual(v.WriteMirror.OutOfSync, s.want) || l.Generation != gen {
			t.Fatalf("after %v: out of sync %v at generation %d, want %v at %d", s.legs, v.WriteMirror.OutOfSync, l.Generation, s.want, gen)
		}
	}
	for _, bad := range [][]int{{0, 1}, {2}} {
		if _, err := l.SetMirrorOutOfSync("ledger", bad); err == nil {
			t.Errorf("SetMirrorOutOfSync(%v) = nil, want an error", bad)
		}
	}
	if _, err := l.SetMirrorOutOfSync("plain", []int{1}); err == nil {
		t.Error("out of sync legs recorded on a volume without a mirror")
	}
}
