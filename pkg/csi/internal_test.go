package csi

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
)

func TestVolumeSize(t *testing.T) {
	const mi = 1 << 20
	for _, tt := range []struct {
		req, limit int64
		want       uint64
		bad        bool
	}{
		{0, 0, 1 << 30, false},             // the default
		{0, 100 * mi, 100 * mi, false},     // the default, within the limit
		{1, 0, 16 * mi, false},             // the smallest volume
		{32 * mi, 32 * mi, 32 * mi, false}, // exact
		{32*mi + 1, 0, 33 * mi, false},     // rounded up to 1 MiB
		{32*mi + 1, 32*mi + 2, 0, true},    // no multiple of 1 MiB in range
		{0, mi, 0, true},                   // below the smallest volume
		{-1, 0, 0, true},
	} {
		got, err := volumeSize(&csi.CapacityRange{RequiredBytes: tt.req, LimitBytes: tt.limit}, 1<<30)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("volumeSize(%d, %d) = %d, %v; want %d (error %v)", tt.req, tt.limit, got, err, tt.want, tt.bad)
		}
	}
}

func TestParseMountInfo(t *testing.T) {
	data := []byte(`22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
98 22 253:4 / /var/lib/kubelet/plugins/staging\040dir rw,noatime shared:50 - xfs /dev/mapper/tc-pvc-1 rw,attr2
99 22 253:4 / /var/lib/kubelet/pods/x/mount ro,relatime shared:50 - xfs /dev/mapper/tc-pvc-1 rw,attr2
100 22 0:5 /dm-4 /var/lib/kubelet/pods/y/dev rw,nosuid - devtmpfs udev rw
`)
	got, err := parseMountInfo(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d mounts, want 4", len(got))
	}
	want := mount{Dev: unix.Mkdev(253, 4), MountPoint: "/var/lib/kubelet/plugins/staging dir", FSType: "xfs", Source: "/dev/mapper/tc-pvc-1"}
	if got[1] != want {
		t.Errorf("mount 1 = %+v, want %+v", got[1], want)
	}
	if !got[2].ReadOnly || got[1].ReadOnly {
		t.Errorf("read-only flags %v %v, want false true", got[1].ReadOnly, got[2].ReadOnly)
	}
	if got[3].FSType != "devtmpfs" || got[3].Source != "udev" {
		t.Errorf("mount without optional fields: %+v", got[3])
	}
	for _, bad := range []string{"1 2 3\n", "22 1 8:1 / / rw shared:1 ext4 /dev/sda1 rw\n", "22 1 x / / rw - ext4 /dev/sda1 rw\n"} {
		if _, err := parseMountInfo([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
