// SPDX-License-Identifier: Apache-2.0

package testbed

import "testing"

func TestParseDiskStats(t *testing.T) {
	b := readTestdata(t, "blockstat.txt")
	s, err := parseDiskStats(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if s != (DiskStats{Reads: 1476, Writes: 2901, Flushes: 0}) {
		t.Errorf("got %+v", s)
	}
	s, err = parseDiskStats("1 0 0 0 2 0 0 0 0 0 0 0 0 0 0 7 0")
	if err != nil || s.Flushes != 7 {
		t.Errorf("17 fields: %+v, %v", s, err)
	}
	if d := (DiskStats{Reads: 5, Writes: 9, Flushes: 3}).Sub(DiskStats{Reads: 1, Writes: 4, Flushes: 3}); d != (DiskStats{Reads: 4, Writes: 5}) {
		t.Errorf("Sub: %+v", d)
	}
	for _, bad := range []string{"", "1 2 3", "1 0 0 0 x 0 0 0 0 0 0"} {
		if _, err := parseDiskStats(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
