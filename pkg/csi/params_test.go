// SPDX-License-Identifier: Apache-2.0

package csi_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/csi"
	"github.com/tidecache/tidecache/pkg/pool"
)

func TestParseParameters(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   map[string]string
		want csi.Parameters
		err  []string // fragments of the error, each naming the key at fault
	}{
		{name: "none", in: nil},
		{name: "mysql", in: map[string]string{"writeCache": "8Gi", "readCache": "16GiB", "readBlockSize": "256K", "mode": "writeback", "protect": "local", "fsType": "xfs"},
			want: csi.Parameters{WriteCacheBytes: 8 << 30, ReadCacheBytes: 16 << 30, ReadBlockSize: 256 << 10, Mode: "writeback", Protect: "local", FSType: "xfs"}},
		{name: "plain bytes", in: map[string]string{"writeCache": "16777216"}, want: csi.Parameters{WriteCacheBytes: 16 << 20}},
		{name: "zero cache", in: map[string]string{"writeCache": "0", "mode": "writethrough"}, want: csi.Parameters{Mode: "writethrough"}},
		{name: "kubernetes keys pass", in: map[string]string{"csi.storage.k8s.io/fstype": "ext4", "csi.storage.k8s.io/pvc/name": "x"}},
		{name: "the claim, from the provisioner's metadata", in: map[string]string{"csi.storage.k8s.io/pvc/name": "data-mysql-0", "csi.storage.k8s.io/pvc/namespace": "shop"},
			want: csi.Parameters{Claim: &api.Claim{Namespace: "shop", Name: "data-mysql-0"}}},
		{name: "a claim that cannot be one is left out", in: map[string]string{"csi.storage.k8s.io/pvc/name": "Data", "csi.storage.k8s.io/pvc/namespace": "shop"}},
		{name: "unknown key", in: map[string]string{"writecache": "1G"}, err: []string{`unknown parameter "writecache"`}},
		{name: "size", in: map[string]string{"writeCache": "1.5G"}, err: []string{`writeCache "1.5G"`}},
		{name: "unit", in: map[string]string{"readCache": "1Q"}, err: []string{`readCache "1Q"`}},
		{name: "below minimum", in: map[string]string{"writeCache": "8Mi"}, err: []string{"writeCache 8Mi: below the minimum of 16 MiB"}},
		{name: "read block size", in: map[string]string{"readCache": "1G", "readBlockSize": "96Ki"}, err: []string{`readBlockSize "96Ki"`}},
		{name: "read block size alone", in: map[string]string{"readBlockSize": "64Ki"}, err: []string{"readBlockSize needs readCache"}},
		{name: "mode", in: map[string]string{"mode": "fast"}, err: []string{`mode "fast"`}},
		{name: "writeback without write cache", in: map[string]string{"mode": "writeback"}, err: []string{"mode writeback needs writeCache"}},
		{name: "protect", in: map[string]string{"protect": "raid"}, err: []string{`protect "raid"`}},
		{name: "protect without write cache", in: map[string]string{"protect": "peer"}, err: []string{"protect peer mirrors the write cache"}},
		{name: "fsType", in: map[string]string{"fsType": "btrfs"}, err: []string{`fsType "btrfs": want ext4 or xfs`}},
		{name: "every problem", in: map[string]string{"mode": "fast", "fsType": "zfs", "x": "1"}, err: []string{"mode", "fsType", `"x"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := csi.ParseParameters(tt.in)
			if len(tt.err) == 0 {
				if err != nil || !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			for _, frag := range tt.err {
				if err == nil || !strings.Contains(err.Error(), frag) {
					t.Fatalf("error %v lacks %q", err, frag)
				}
			}
		})
	}
}

func TestVolumeName(t *testing.T) {
	long := "sanity-controller-create-maxlen-" + strings.Repeat("ab12", 24)
	for _, tt := range []struct{ in, want string }{
		{"pvc-3f1c9a2e-8d4b-4c1a-9f7e-2b6d5e4a3c21", "pvc-3f1c9a2e-8d4b-4c1a-9f7e-2b6d5e4a3c21"},
		{"db", "db"},
		{"PVC_Data.1", "pvc-data-1-"},
		{"db-origin", "db-origin-"},
		{long, "sanity-controller-create-maxlen-ab1-"},
		{"___", "csi-"},
	} {
		got := csi.VolumeName(tt.in)
		if err := pool.ValidateName("volume", got); err != nil {
			t.Errorf("VolumeName(%q) = %q: %v", tt.in, got, err)
		}
		if got != tt.want && !(strings.HasSuffix(tt.want, "-") && strings.HasPrefix(got, tt.want) && len(got) == len(tt.want)+12) {
			t.Errorf("VolumeName(%q) = %q, want %q (and 12 hex digits when it ends in '-')", tt.in, got, tt.want)
		}
		if again := csi.VolumeName(tt.in); again != got {
			t.Errorf("VolumeName(%q) not deterministic: %q then %q", tt.in, got, again)
		}
	}
	// Names that clean up alike still differ.
	if a, b := csi.VolumeName("Data"), csi.VolumeName("DATA"); a == b {
		t.Errorf("VolumeName(Data) = VolumeName(DATA) = %q", a)
	}
	if a, b := csi.VolumeName(long+"x"), csi.VolumeName(long+"y"); a == b {
		t.Errorf("two long names map to %q", a)
	}
}
