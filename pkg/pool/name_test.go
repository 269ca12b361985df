// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name, kind, in string
		wantErr        string // substring; "" means valid
	}{
		{"simple", "volume", "db", ""},
		{"digits and dash", "volume", "mysql-01", ""},
		{"single char", "volume", "a", ""},
		{"leading digit", "volume", "0db", ""},
		{"48 chars", "volume", strings.Repeat("a", 48), ""},
		{"49 chars", "volume", strings.Repeat("a", 49), "longer than 48 characters"},
		{"empty", "volume", "", "empty"},
		{"uppercase", "volume", "Foo", `invalid volume name "Foo": only a-z, 0-9 and '-' allowed`},
		{"underscore", "volume", "my_db", "only a-z, 0-9 and '-' allowed"},
		{"dot", "volume", "db.1", "only a-z, 0-9 and '-' allowed"},
		{"space", "volume", "db 1", "only a-z, 0-9 and '-' allowed"},
		{"non-ascii", "volume", "dbé", "only a-z, 0-9 and '-' allowed"},
		{"slash", "volume", "a/b", "only a-z, 0-9 and '-' allowed"},
		{"leading dash", "volume", "-db", "must start with a letter or digit"},
		{"trailing dash", "volume", "db-", "must end with a letter or digit"},
		{"double dash", "volume", "db--1", `must not contain "--"`},
		{"reserved suffix", "volume", "db-origin", `must not end in "-origin"`},
		{"reserved suffix wdata", "volume", "x-wdata", `must not end in "-wdata"`},
		{"suffix without dash is fine", "volume", "wdata", ""},
		{"pool may end in role", "pool", "fast-origin", ""},
		{"pool kind in message", "pool", "Pool", `invalid pool name "Pool"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateName(tt.kind, tt.in)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateName(%q) = %v, want nil", tt.in, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateName(%q) = nil, want error containing %q", tt.in, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ValidateName(%q) = %q, want it to contain %q", tt.in, err, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidName) {
				t.Errorf("ValidateName(%q) error does not wrap ErrInvalidName", tt.in)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range Modes {
		got, err := ParseMode(string(m))
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %q, %v", m, got, err)
		}
	}
	for _, s := range []string{"", "WriteBack", "write-back", "none"} {
		if _, err := ParseMode(s); !errors.Is(err, ErrInvalidMode) {
			t.Errorf("ParseMode(%q) = %v, want ErrInvalidMode", s, err)
		}
	}
}

func TestCheckSizes(t *testing.T) {
	err := CheckMemberSize("/dev/nvme0n1", 32<<20)
	if !errors.Is(err, ErrTooSmall) {
		t.Fatalf("CheckMemberSize(32 MiB) = %v, want ErrTooSmall", err)
	}
	for _, want := range []string{"/dev/nvme0n1", "32 MiB", "64 MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if err := CheckMemberSize("/dev/nvme0n1", MinMemberBytes); err != nil {
		t.Errorf("CheckMemberSize(minimum) = %v", err)
	}
	err = CheckOriginSize("/dev/md/tc-data", 1<<20)
	if !errors.Is(err, ErrTooSmall) || !strings.Contains(err.Error(), "/dev/md/tc-data") || !strings.Contains(err.Error(), "1 MiB") {
		t.Errorf("CheckOriginSize(1 MiB) = %v", err)
	}
	if err := CheckOriginSize("/dev/md/tc-data", 1<<40); err != nil {
		t.Errorf("CheckOriginSize(1 TiB) = %v", err)
	}
}

func TestReadMetaSectors(t *testing.T) {
	const mib = 2048 // sectors
	tests := []struct {
		cacheBytes uint64
		wantMiB    uint64
	}{
		{16 << 20, 8},   // minimum wins
		{64 << 30, 36},  // 4 MiB + 16 B * 2 Mi blocks = 4 + 32 MiB
		{100 << 30, 54}, // 4 + 50 MiB
		{1 << 40, 516},  // 4 + 512 MiB
		{8193 << 20, 9}, // 4 MiB + 4 MiB + 512 B rounds up to 9 MiB
	}
	for _, tt := range tests {
		got := ReadMetaSectors(BytesToSectors(tt.cacheBytes))
		if got%Alignment != 0 || got != tt.wantMiB*mib {
			t.Errorf("ReadMetaSectors(%s) = %d sectors, want %d MiB", FormatBytes(tt.cacheBytes), got, tt.wantMiB)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	tests := map[uint64]string{
		0:             "0 B",
		512:           "512 B",
		1024:          "1 KiB",
		16 << 20:      "16 MiB",
		3 << 29:       "1536 MiB",
		10236 << 20:   "10236 MiB",
		(1 << 30) + 1: "1.0 GiB",
		1 << 40:       "1 TiB",
		^uint64(0):    "16.0 EiB",
	}
	for in, want := range tests {
		if got := FormatBytes(in); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", in, got, want)
		}
	}
}
