// SPDX-License-Identifier: Apache-2.0

package mdraid

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseDetailExport(t *testing.T) {
	tests := []struct {
		file     string
		want     detail
		wantName string
	}{
		{
			file: "detail-export-raid10.txt",
			want: detail{
				level: "10", raidDevices: 4, metadata: "1.2",
				uuid:    "3b2a4c1e:8f0d2b6a:5c7e9d10:2f4a6b8c",
				devName: "tc-origin", name: "any:tc-origin",
				devices: []string{"/dev/vdb", "/dev/vdc", "/dev/vdd", "/dev/vde"},
			},
			wantName: "tc-origin",
		},
		{
			file: "detail-export-raid1-degraded.txt",
			want: detail{
				level: "1", raidDevices: 2, metadata: "1.2",
				uuid:    "9e0c7a51:44d2b8f3:0a6e1c9d:7b3f5e21",
				name:    "any:tc-db-wc",
				devices: []string{"/dev/dm-4"},
				spares:  []string{"/dev/nvme1n1"},
			},
			wantName: "tc-db-wc",
		},
		{
			file: "detail-export-foreign.txt",
			want: detail{
				level: "1", raidDevices: 2, metadata: "1.2",
				uuid:    "0f1e2d3c:4b5a6978:8796a5b4:c3d2e1f0",
				name:    "oldhost:0",
				devices: []string{"/dev/sda1", "/dev/sdb1"},
			},
			wantName: "0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseDetailExport(raw)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			if n := got.arrayName(); n != tt.wantName {
				t.Errorf("arrayName() = %q, want %q", n, tt.wantName)
			}
		})
	}

	for name, bad := range map[string]string{
		"empty":          "",
		"no level":       "MD_DEVICES=2\n",
		"no devices":     "MD_LEVEL=raid1\n",
		"bad count":      "MD_LEVEL=raid1\nMD_DEVICES=two\n",
		"bad uuid":       "MD_LEVEL=raid1\nMD_DEVICES=2\nMD_UUID=3b2a4c1e-8f0d-2b6a-5c7e-9d102f4a6b8c\n",
		"bad role":       "MD_LEVEL=raid1\nMD_DEVICES=2\nMD_DEVICE_dev_vdb_ROLE=-3\n",
		"not key=value":  "MD_LEVEL=raid1\nMD_DEVICES=2\nmdadm: cannot open\n",
		"container only": "MD_DEVICES=2\nMD_METADATA=imsm\n",
	} {
		if got, err := parseDetailExport([]byte(bad)); err == nil {
			t.Errorf("%s: parseDetailExport(%q) = %+v, want error", name, bad, got)
		}
	}
}

func TestParseScan(t *testing.T) {
	tests := []struct {
		file string
		want []scanEntry
	}{
		{
			file: "detail-scan.txt",
			want: []scanEntry{
				{device: "/dev/md/tc-origin", uuid: "3b2a4c1e:8f0d2b6a:5c7e9d10:2f4a6b8c", name: "any:tc-origin"},
				{device: "/dev/md127", uuid: "0f1e2d3c:4b5a6978:8796a5b4:c3d2e1f0", name: "oldhost:home dir"},
				{device: "/dev/md126", inactive: true, uuid: "9e0c7a51:44d2b8f3:0a6e1c9d:7b3f5e21", name: "any:tc-db-wc"},
			},
		},
		{
			file: "examine-scan.txt",
			want: []scanEntry{
				{device: "/dev/md/tc-origin", uuid: "3b2a4c1e:8f0d2b6a:5c7e9d10:2f4a6b8c", name: "any:tc-origin"},
				{device: "/dev/md/tc-db-wc", uuid: "9e0c7a51:44d2b8f3:0a6e1c9d:7b3f5e21", name: "any:tc-db-wc", spares: 1},
			},
		},
		{
			// mdadm 4.2 in the VM, one of four disks wiped.
			file: "examine-scan-verbose.txt",
			want: []scanEntry{
				{device: "/dev/md/tc-origin", uuid: "c9ce070f:128d093e:f18cd0f6:2c3ed999", name: "vmrun:tc-origin",
					numDevices: 4, devices: []string{"/dev/vdc", "/dev/vdb", "/dev/vda"}},
				{device: "/dev/md/tc-db-wc", uuid: "9e0c7a51:44d2b8f3:0a6e1c9d:7b3f5e21", name: "any:tc-db-wc",
					numDevices: 2, spares: 1, devices: []string{"/dev/nvme0n1p3", "/dev/nvme1n1p3", "/dev/sdx"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseScan(raw)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if got, err := parseScan(nil); err != nil || len(got) != 0 {
		t.Errorf("parseScan(nil) = %v, %v", got, err)
	}
	if _, err := parseScan([]byte("ARRAY /dev/md0 UUID=nonsense\n")); err == nil {
		t.Error("parseScan accepted a bad UUID")
	}
}

func TestScanEntryShortName(t *testing.T) {
	tests := []struct {
		e    scanEntry
		want string
	}{
		{scanEntry{device: "/dev/md/x", name: "any:tc-origin"}, "tc-origin"},
		{scanEntry{device: "/dev/md/x", name: "bare"}, "bare"},
		{scanEntry{device: "/dev/md/from-path"}, "from-path"},
		{scanEntry{device: "/dev/md127"}, ""},
	}
	for _, tt := range tests {
		if got := tt.e.shortName(); got != tt.want {
			t.Errorf("%+v.shortName() = %q, want %q", tt.e, got, tt.want)
		}
	}
}

func TestSplitQuoted(t *testing.T) {
	tests := map[string][]string{
		`ARRAY /dev/md0 name=a:b UUID=x`:      {"ARRAY", "/dev/md0", "name=a:b", "UUID=x"},
		`ARRAY  /dev/md0	name="h:with space"`: {"ARRAY", "/dev/md0", "name=h:with space"},
		`name='say "hi"' x`:                   {`name=say "hi"`, "x"},
		`name="it's"`:                         {`name=it's`},
		``:                                    nil,
	}
	for in, want := range tests {
		if got := splitQuoted(in); !slices.Equal(got, want) {
			t.Errorf("splitQuoted(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNormalizeUUID(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"3b2a4c1e:8f0d2b6a:5c7e9d10:2f4a6b8c", "3b2a4c1e:8f0d2b6a:5c7e9d10:2f4a6b8c", true},
		{" 9E0C7A51:44D2B8F3:0A6E1C9D:7B3F5E21\n", "9e0c7a51:44d2b8f3:0a6e1c9d:7b3f5e21", true},
		{"3b2a4c1e-8f0d-2b6a-5c7e-9d102f4a6b8c", "", false},
		{"3b2a4c1e:8f0d2b6a:5c7e9d10", "", false},
		{"3b2a4c1e:8f0d2b6a:5c7e9d10:2f4a6b8g", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, err := NormalizeUUID(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("NormalizeUUID(%q) = %q, %v", tt.in, got, err)
		}
	}
}

func TestCreateOptionsValidate(t *testing.T) {
	four := []string{"/dev/vdb", "/dev/vdc", "/dev/vdd", "/dev/vde"}
	tests := []struct {
		name    string
		o       CreateOptions
		wantErr string
	}{
		{name: "raid10", o: CreateOptions{Name: "tc-origin", Level: "10", Devices: four, Chunk: "512K", Layout: "n2"}},
		{name: "raid10 six", o: CreateOptions{Name: "o", Level: "10", Devices: append(four, "/dev/vdf", "/dev/vdg"), Layout: "f2"}},
		{name: "raid1", o: CreateOptions{Name: "tc-db.wc_1", Level: "1", Devices: four[:2]}},
		{name: "raid10 three", o: CreateOptions{Name: "o", Level: "10", Devices: four[:3]}, wantErr: "even number of at least 4"},
		{name: "raid10 five", o: CreateOptions{Name: "o", Level: "10", Devices: append(four, "/dev/vdf")}, wantErr: "even number"},
		{name: "raid10 two", o: CreateOptions{Name: "o", Level: "10", Devices: four[:2]}, wantErr: "at least 4"},
		{name: "raid1 three", o: CreateOptions{Name: "o", Level: "1", Devices: four[:3]}, wantErr: "exactly 2"},
		{name: "raid1 chunk", o: CreateOptions{Name: "o", Level: "1", Devices: four[:2], Chunk: "64K"}, wantErr: "no chunk"},
		{name: "raid5", o: CreateOptions{Name: "o", Level: "5", Devices: four}, wantErr: `level "5"`},
		{name: "raid prefix", o: CreateOptions{Name: "o", Level: "raid10", Devices: four}, wantErr: "level"},
		{name: "bad chunk", o: CreateOptions{Name: "o", Level: "10", Devices: four, Chunk: "512KiB"}, wantErr: "chunk"},
		{name: "bad layout", o: CreateOptions{Name: "o", Level: "10", Devices: four, Layout: "near2"}, wantErr: "layout"},
		{name: "empty name", o: CreateOptions{Level: "1", Devices: four[:2]}, wantErr: "array name"},
		{name: "name with slash", o: CreateOptions{Name: "a/b", Level: "1", Devices: four[:2]}, wantErr: "array name"},
		{name: "name with colon", o: CreateOptions{Name: "host:a", Level: "1", Devices: four[:2]}, wantErr: "array name"},
		{name: "name starting with dash", o: CreateOptions{Name: "-a", Level: "1", Devices: four[:2]}, wantErr: "array name"},
		{name: "name 27", o: CreateOptions{Name: strings.Repeat("a", 27), Level: "1", Devices: four[:2]}},
		{name: "name 28", o: CreateOptions{Name: strings.Repeat("a", 28), Level: "1", Devices: four[:2]}, wantErr: "array name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("validate() = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}
