// SPDX-License-Identifier: Apache-2.0

package dm_test

import (
	"fmt"
	"testing"

	"github.com/tidecache/tidecache/pkg/dm"
)

// fakeDevs maps the paths tidecache's tables use to the major:minor the kernel
// prints back.
func fakeDevs(ref string) (string, error) {
	m := map[string]string{
		"/dev/mapper/tc-db-origin": "253:0",
		"/dev/mapper/tc-db-rmeta":  "253:1",
		"/dev/mapper/tc-db-rdata":  "253:2",
		"/dev/mapper/tc-db-rtier":  "253:3",
		"/dev/mapper/tc-db-wdata":  "253:4",
		"/dev/mapper/tc-db-wtier":  "253:5",
		"/dev/md/tc-tank":          "9:127",
	}
	if c, ok := m[ref]; ok {
		return c, nil
	}
	if len(ref) > 0 && ref[0] == '/' {
		return "", fmt.Errorf("no such device %s", ref)
	}
	return ref, nil
}

func TestTargetEquivalent(t *testing.T) {
	target := func(typ, params string) dm.Target {
		return dm.Target{Start: 0, Length: 524288, Type: typ, Params: params}
	}
	cases := []struct {
		name      string
		want, got dm.Target
		same      bool
	}{
		{"linear as printed by the kernel",
			target("linear", "/dev/md/tc-tank 8192"), target("linear", "9:127 8192"), true},
		{"linear other offset",
			target("linear", "/dev/md/tc-tank 8192"), target("linear", "9:127 16384"), false},
		{"writecache as printed by 6.1",
			target("writecache", "s /dev/mapper/tc-db-rtier /dev/mapper/tc-db-wdata 4096 0"),
			target("writecache", "s 253:3 253:4 4096 0"), true},
		{"writecache with cleaner left on is drift",
			target("writecache", "s /dev/mapper/tc-db-rtier /dev/mapper/tc-db-wdata 4096 0"),
			target("writecache", "s 253:3 253:4 4096 1 cleaner"), false},
		{"writecache other watermark",
			target("writecache", "s /dev/mapper/tc-db-origin /dev/mapper/tc-db-wdata 4096 2 high_watermark 50"),
			target("writecache", "s 253:0 253:4 4096 2 high_watermark 60"), false},
		{"cache with features in another order",
			target("cache", "/dev/mapper/tc-db-rmeta /dev/mapper/tc-db-rdata /dev/mapper/tc-db-origin 128 2 metadata2 writethrough smq 0"),
			target("cache", "253:1 253:2 253:0 128 2 writethrough metadata2 smq 0"), true},
		{"cache in writeback is drift",
			target("cache", "/dev/mapper/tc-db-rmeta /dev/mapper/tc-db-rdata /dev/mapper/tc-db-origin 128 2 metadata2 writethrough smq 0"),
			target("cache", "253:1 253:2 253:0 128 2 metadata2 writeback smq 0"), false},
		{"fuaflush as printed by the kernel",
			target("fuaflush", "/dev/mapper/tc-db-wtier"), target("fuaflush", "253:5"), true},
		{"fuaflush over another device",
			target("fuaflush", "/dev/mapper/tc-db-wtier"), target("fuaflush", "253:4"), false},
		{"linear top where fuaflush is wanted is drift",
			target("fuaflush", "/dev/mapper/tc-db-wtier"), target("linear", "253:5 0"), false},
		{"readfirst as printed by the kernel",
			target("readfirst", "/dev/mapper/tc-db-origin 1000 50"), target("readfirst", "253:0 1000 50"), true},
		{"readfirst with another hold bound is drift",
			target("readfirst", "/dev/mapper/tc-db-origin 1000 50"), target("readfirst", "253:0 500 50"), false},
		{"errhold as printed by the kernel",
			target("errhold", "/dev/mapper/tc-db-origin 16"), target("errhold", "253:0 16"), true},
		{"errhold at another offset is drift",
			target("errhold", "/dev/mapper/tc-db-origin 16"), target("errhold", "253:0 0"), false},
		{"linear peer slice where errhold is wanted is drift",
			target("errhold", "/dev/mapper/tc-db-origin 16"), target("linear", "253:0 16"), false},
		{"other type",
			target("linear", "/dev/md/tc-tank 8192"), target("error", ""), false},
		{"other length",
			target("linear", "/dev/md/tc-tank 8192"), dm.Target{Length: 1, Type: "linear", Params: "9:127 8192"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			same, err := tc.want.Equivalent(tc.got, fakeDevs)
			if err != nil {
				t.Fatalf("Equivalent: %v", err)
			}
			if same != tc.same {
				t.Errorf("Equivalent = %v, want %v", same, tc.same)
			}
		})
	}
	if _, err := target("linear", "/dev/nope 0").Equivalent(target("linear", "9:127 0"), fakeDevs); err == nil {
		t.Error("an unresolvable device must be an error, not a silent mismatch")
	}
}

func TestTableEquivalent(t *testing.T) {
	want := dm.Table{
		dm.LinearParams{Device: "/dev/md/tc-tank", Offset: 0}.Target(0, 8),
		dm.LinearParams{Device: "/dev/md/tc-tank", Offset: 64}.Target(8, 8),
	}
	got := dm.Table{
		dm.LinearParams{Device: "9:127", Offset: 0}.Target(0, 8),
		dm.LinearParams{Device: "9:127", Offset: 64}.Target(8, 8),
	}
	for _, c := range []struct {
		name string
		got  dm.Table
		same bool
	}{
		{"as printed by the kernel", got, true},
		{"a target missing", got[:1], false},
		{"a target differs", dm.Table{got[0], dm.LinearParams{Device: "9:127", Offset: 72}.Target(8, 8)}, false},
		{"empty", nil, false},
	} {
		same, err := want.Equivalent(c.got, fakeDevs)
		if err != nil || same != c.same {
			t.Errorf("%s: Equivalent = %v, %v; want %v", c.name, same, err, c.same)
		}
	}
	bad := dm.Table{{Start: 0, Length: 8, Type: "cache", Params: "not cache params"}}
	if _, err := bad.Equivalent(bad, fakeDevs); err == nil {
		t.Error("unparsable params must be an error, not a silent mismatch")
	}
}
