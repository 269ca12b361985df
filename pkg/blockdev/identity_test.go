// SPDX-License-Identifier: Apache-2.0

package blockdev

import "testing"

func TestSysfsIdentity(t *testing.T) {
	f := newFakeSys(t)
	f.disk("nvme0n1", "259:0", [3]string{"nvme0n1p1", "1", "259:1"})
	f.write("devices/virtual/block/nvme0n1/wwid", "eui.0025388b71b2c3d4\n")
	f.write("devices/virtual/block/nvme0n1/device/serial", "S4EWNX0R123456  \n")
	f.disk("sda", "8:0")
	f.write("devices/virtual/block/sda/device/wwid", "naa.5000c500a1b2c3d4\n")
	f.write("devices/virtual/block/sda/serial", "\n") // blank: look further
	f.write("devices/virtual/block/sda/device/serial", "ZA1B2C3D\n")
	f.disk("vdb", "254:16")
	tests := []struct {
		name      string
		want      Identity
		partition bool
	}{
		{"nvme0n1", Identity{WWN: "eui.0025388b71b2c3d4", Serial: "S4EWNX0R123456"}, false},
		{"sda", Identity{WWN: "naa.5000c500a1b2c3d4", Serial: "ZA1B2C3D"}, false},
		{"nvme0n1p1", Identity{}, true},
		{"vdb", Identity{}, false}, // a virtio disk without a serial: nothing, no error
	}
	for _, tt := range tests {
		id, part, err := sysfsIdentity(f.root, tt.name)
		if err != nil || id != tt.want || part != tt.partition {
			t.Errorf("sysfsIdentity(%s) = %+v, partition %v, %v; want %+v, partition %v", tt.name, id, part, err, tt.want, tt.partition)
		}
	}
	if _, _, err := sysfsIdentity(f.root, "sdz"); err == nil {
		t.Error("sysfsIdentity of a device sysfs does not list: no error")
	}
}
