// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/command"
)

func TestParseBlkidExport(t *testing.T) {
	tests := []struct {
		file    string
		want    []Signature
		wantErr bool
	}{
		{file: "blkid-ext4.export", want: []Signature{
			{Type: "ext4", Usage: "filesystem", Label: "mysql data", UUID: "f49e1a20-cf28-446a-8006-cf86a5ef6aad", BlockSize: 4096},
		}},
		{file: "blkid-md-member.export", want: []Signature{
			{Type: "linux_raid_member", Usage: "raid", Label: "any:tc-origin", UUID: "3b2a4c1e-8f0d-2b6a-5c7e-9d102f4a6b8c"},
		}},
		{file: "blkid-lvm.export", want: []Signature{
			{Type: "LVM2_member", Usage: "raid", UUID: "Nq3bVx-2Yc1-Qp7R-0aZk-Lm4T-9sWd-Hf6Ju2"},
		}},
		{file: "blkid-gpt.export", want: []Signature{
			{Type: "gpt", Usage: UsagePartitionTable, UUID: "5f1c0a3e-7b2d-4c9e-8a61-2d3f4e5a6b7c"},
		}},
		{file: "blkid-partition-xfs.export", want: []Signature{
			{Type: "xfs", Usage: "filesystem", UUID: "8d2e6c4a-1b3f-4e5d-9a7c-0f2e4d6b8a1c", BlockSize: 512},
		}},
		// Captured on Debian's 6.1 kernel: a new, empty GPT partition.
		// blkid -p exits 0 and only describes the partition.
		{file: "blkid-blank-partition.export", want: []Signature{}},
		{file: "blkid-ext4-dos.export", want: []Signature{
			{Type: "ext4", Usage: "filesystem", Label: "my disk$", UUID: "f49e1a20-cf28-446a-8006-cf86a5ef6aad", BlockSize: 1024},
			{Type: "dos", Usage: UsagePartitionTable, UUID: "78563412"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseBlkidExport(raw)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}

	for _, bad := range []string{
		"",                                   // exit 0 but nothing: never read as "no signature"
		"DEVNAME=/dev/vdb\nBLOCK_SIZE=512\n", // no TYPE or PTTYPE
		"DEVNAME=/dev/vdb\ngarbage\nTYPE=ext4\n",
	} {
		if got, err := parseBlkidExport([]byte(bad)); err == nil {
			t.Errorf("parseBlkidExport(%q) = %+v, want error", bad, got)
		}
	}
}

func TestParseWipefsJSON(t *testing.T) {
	raw, err := os.ReadFile("testdata/wipefs-ambivalent.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseWipefsJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := []Signature{
		{Type: "ext4", Usage: "filesystem", Label: "old data", UUID: "f49e1a20-cf28-446a-8006-cf86a5ef6aad"},
		{Type: "linux_raid_member", Usage: "raid", Label: "any:tc-origin", UUID: "3b2a4c1e-8f0d-2b6a-5c7e-9d102f4a6b8c"},
		{Type: "dos", Usage: UsagePartitionTable},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if _, err := parseWipefsJSON([]byte("not json")); err == nil {
		t.Error("no error on bad JSON")
	}
}

func TestUnescapeBlkid(t *testing.T) {
	tests := map[string]string{
		`plain`:                "plain",
		`my\ disk\$`:           "my disk$",
		`a\\b`:                 `a\b`,
		"q\\\"x\\'y\\<z\\>\\`": "q\"x'y<z>`",
		`trailing\`:            `trailing\`,
	}
	for in, want := range tests {
		if got := unescapeBlkid(in); got != want {
			t.Errorf("unescapeBlkid(%q) = %q, want %q", in, got, want)
		}
	}
}

// image makes a zeroed file of size bytes.
func image(t *testing.T, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeMBR puts a DOS partition table with one Linux partition into img.
func writeMBR(t *testing.T, img string) {
	t.Helper()
	sector := make([]byte, 512)
	binary.LittleEndian.PutUint32(sector[440:], 0x78563412) // disk identifier
	entry := sector[446:462]
	entry[4] = 0x83                                 // Linux
	binary.LittleEndian.PutUint32(entry[8:], 2048)  // first LBA
	binary.LittleEndian.PutUint32(entry[12:], 4096) // sectors
	sector[510], sector[511] = 0x55, 0xaa
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(sector, 0); err != nil {
		t.Fatal(err)
	}
}

func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not installed", name)
	}
}

func TestProbeImages(t *testing.T) {
	needTool(t, "blkid")
	ctx := context.Background()
	p := Prober{}

	t.Run("empty", func(t *testing.T) {
		got, err := p.Probe(ctx, image(t, 8<<20))
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("Probe(zeroed image) = %#v, %v; want empty, nil", got, err)
		}
	})
	t.Run("ext4", func(t *testing.T) {
		needTool(t, "mkfs.ext4")
		img := image(t, 8<<20)
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", "db $data", img).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.ext4: %v: %s", err, out)
		}
		got, err := p.Probe(ctx, img)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Type != "ext4" || got[0].Usage != "filesystem" || got[0].Label != "db $data" || got[0].UUID == "" {
			t.Errorf("Probe(ext4 image) = %+v", got)
		}

		writeMBR(t, img)
		got, err = p.Probe(ctx, img)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Type != "ext4" || got[1] != (Signature{Type: "dos", Usage: UsagePartitionTable, UUID: "78563412"}) {
			t.Errorf("Probe(ext4 image with an MBR) = %+v", got)
		}
	})
	t.Run("partition table", func(t *testing.T) {
		img := image(t, 8<<20)
		writeMBR(t, img)
		got, err := p.Probe(ctx, img)
		if err != nil || len(got) != 1 || got[0].Type != "dos" {
			t.Errorf("Probe(MBR image) = %+v, %v", got, err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, err := p.Probe(ctx, filepath.Join(t.TempDir(), "gone"))
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Probe(missing) = %v, want ErrNotExist", err)
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		if _, err := p.Probe(ctx, t.TempDir()); !errors.Is(err, ErrNotBlockDevice) {
			t.Errorf("Probe(directory) = %v", err)
		}
	})
}

// fakeTools puts shell scripts named after tools first in PATH.
func fakeTools(t *testing.T, scripts map[string]string) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

func TestProbeExitCodes(t *testing.T) {
	wipefsJSON, err := filepath.Abs("testdata/wipefs-ambivalent.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		blkid   string
		wipefs  string
		want    []Signature
		wantErr string
	}{
		{
			name:  "ambivalent result lists every signature",
			blkid: `echo "$5: ambivalent result (probably more filesystems on the device, use wipefs(8) to see more details)" >&2; exit 8`,
			wipefs: `[ "$1 $2 $3 $4" = "--no-act --json --output TYPE,USAGE,LABEL,UUID,OFFSET" ] || exit 99
cat ` + wipefsJSON,
			want: []Signature{
				{Type: "ext4", Usage: "filesystem", Label: "old data", UUID: "f49e1a20-cf28-446a-8006-cf86a5ef6aad"},
				{Type: "linux_raid_member", Usage: "raid", Label: "any:tc-origin", UUID: "3b2a4c1e-8f0d-2b6a-5c7e-9d102f4a6b8c"},
				{Type: "dos", Usage: UsagePartitionTable},
			},
		},
		{
			name:    "ambivalent but wipefs lists nothing",
			blkid:   "exit 8",
			wipefs:  `echo '{"signatures": []}'`,
			wantErr: "blkid found conflicting signatures but wipefs lists none",
		},
		{
			name:    "blkid usage error",
			blkid:   "echo 'blkid: bad usage' >&2; exit 4",
			wantErr: "exit status 4: blkid: bad usage",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakeTools(t, map[string]string{"blkid": tt.blkid, "wipefs": tt.wipefs})
			got, err := Prober{Runner: command.Runner{}}.Probe(context.Background(), image(t, 4096))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Probe = %+v, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
