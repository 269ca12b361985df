// SPDX-License-Identifier: Apache-2.0

package testbed

import (
	"strings"
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{FormatIOPS(2731.4), "2,731"},
		{FormatIOPS(1234567), "1,234,567"},
		{FormatIOPS(567.4), "567"},
		{FormatIOPS(71.94), "71.9"},
		{FormatIOPS(3.456), "3.46"},
		{FormatLatency(0), "-"},
		{FormatLatency(85 * time.Microsecond), "85 µs"},
		{FormatLatency(420 * time.Microsecond), "0.42 ms"},
		{FormatLatency(12100 * time.Microsecond), "12.1 ms"},
		{FormatLatency(1200 * time.Millisecond), "1.20 s"},
		{FormatRatio(0.934), "0.93×"},
		{FormatRatio(14.84), "14.8×"},
		{FormatRatio(123.4), "123×"},
		{FormatRatio(0), "-"},
		{FormatBytes(4096), "4 KiB"},
		{FormatBytes(32 << 20), "32 MiB"},
		{FormatBytes(1536 << 10), "1.5 MiB"},
		{FormatBytes(100), "100 B"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestTable(t *testing.T) {
	tb := Table{Header: []string{"device", "IOPS"}}
	tb.Add("raw SSD", "2,731")
	tb.Add("bare RAID10", "71.9")
	tb.Add("O_DIRECT|O_SYNC")
	var text, md strings.Builder
	if err := tb.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	wantText := "device            IOPS\n---------------  -----\nraw SSD          2,731\nbare RAID10       71.9\nO_DIRECT|O_SYNC\n"
	if text.String() != wantText {
		t.Errorf("text:\n%s\nwant:\n%s", text.String(), wantText)
	}
	if err := tb.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	wantMD := "| device | IOPS |\n|---|---:|\n| raw SSD | 2,731 |\n| bare RAID10 | 71.9 |\n| O_DIRECT\\|O_SYNC |  |\n"
	if md.String() != wantMD {
		t.Errorf("markdown:\n%s\nwant:\n%s", md.String(), wantMD)
	}
}
