// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rec is one request of a synthetic log: a write of blocks filled with
// fill, a discard, an empty flush or a mark.
type rec struct {
	flags  uint64
	sector uint64
	n      uint64
	fill   byte
	mark   string
}

func w(sector, n uint64, fill byte) rec { return rec{sector: sector, n: n, fill: fill} }
func fua(sector, n uint64, fill byte) rec {
	return rec{flags: FlagFUA, sector: sector, n: n, fill: fill}
}
func discard(sector, n uint64) rec { return rec{flags: FlagDiscard, sector: sector, n: n} }
func flush() rec                   { return rec{flags: FlagFlush} }
func mark(name string) rec         { return rec{flags: FlagMark, mark: name} }

// buildLog lays the records out as the 6.1 target does.
func buildLog(ss uint32, recs []rec) []byte {
	le := binary.LittleEndian
	var b bytes.Buffer
	blk := make([]byte, ss)
	le.PutUint64(blk[0:], logMagic)
	le.PutUint64(blk[8:], logVersion)
	le.PutUint64(blk[16:], uint64(len(recs)))
	le.PutUint32(blk[24:], ss)
	b.Write(blk)
	for _, r := range recs {
		blk := make([]byte, ss)
		le.PutUint64(blk[0:], r.sector)
		le.PutUint64(blk[8:], r.n)
		le.PutUint64(blk[16:], r.flags)
		if r.flags&FlagMark != 0 {
			le.PutUint64(blk[24:], uint64(len(r.mark)))
			copy(blk[entrySize:], r.mark)
		}
		b.Write(blk)
		if r.flags&(FlagMark|FlagDiscard) == 0 {
			b.Write(bytes.Repeat([]byte{r.fill}, int(r.n)*int(ss)))
		}
	}
	return b.Bytes()
}

func indexes(es []Entry) []int {
	out := []int{}
	for _, e := range es {
		out = append(out, e.Index)
	}
	return out
}

func TestCutAt(t *testing.T) {
	tests := []struct {
		name      string
		recs      []rec
		mark      string
		volatile  bool
		keep      []int
		dropped   []int
		lastFlush int
	}{
		{
			name: "writes before and after a flush, volatile",
			// 0 W, 1 W, 2 FLUSH, 3 W, 4 FUA, 5 MARK
			recs:     []rec{w(0, 1, 1), w(1, 1, 2), flush(), w(2, 1, 3), fua(3, 1, 4), mark("m")},
			mark:     "m",
			volatile: true, keep: []int{0, 1, 4}, dropped: []int{3}, lastFlush: 2,
		},
		{
			name:     "same log, not volatile: everything before the mark",
			recs:     []rec{w(0, 1, 1), w(1, 1, 2), flush(), w(2, 1, 3), fua(3, 1, 4), mark("m")},
			mark:     "m",
			volatile: false, keep: []int{0, 1, 3, 4}, dropped: []int{}, lastFlush: 2,
		},
		{
			name: "no flush before the mark: only FUA writes survive",
			recs: []rec{w(0, 1, 1), fua(1, 2, 2), w(3, 1, 3), mark("m")},
			mark: "m", volatile: true, keep: []int{1}, dropped: []int{0, 2}, lastFlush: -1,
		},
		{
			name: "the last flush counts, not the first; a discard after it is dropped",
			// 0 W, 1 FLUSH, 2 W, 3 FLUSH, 4 DISCARD, 5 FUA, 6 W, 7 MARK
			recs: []rec{w(0, 1, 1), flush(), w(1, 1, 2), flush(), discard(0, 1), fua(2, 1, 3), w(3, 1, 4), mark("m")},
			mark: "m", volatile: true, keep: []int{0, 2, 5}, dropped: []int{4, 6}, lastFlush: 3,
		},
		{
			name: "a later mark: entries after the mark never count; earlier marks are skipped",
			// 0 W, 1 MARK a, 2 FLUSH, 3 FUA, 4 MARK b, 5 W, 6 FLUSH
			recs: []rec{w(0, 1, 1), mark("a"), flush(), fua(1, 1, 2), mark("b"), w(2, 1, 3), flush()},
			mark: "b", volatile: true, keep: []int{0, 3}, dropped: []int{}, lastFlush: 2,
		},
		{
			name: "an earlier mark of the same log",
			recs: []rec{w(0, 1, 1), mark("a"), flush(), fua(1, 1, 2), mark("b"), w(2, 1, 3), flush()},
			mark: "a", volatile: true, keep: []int{}, dropped: []int{0}, lastFlush: -1,
		},
		{
			name: "a flush carrying data is itself durable",
			recs: []rec{w(0, 1, 1), {flags: FlagFlush, sector: 5, n: 1, fill: 9}, w(1, 1, 2), mark("m")},
			mark: "m", volatile: true, keep: []int{0, 1}, dropped: []int{2}, lastFlush: 1,
		},
		{
			name: "a write flagged both FLUSH and FUA",
			recs: []rec{w(0, 1, 1), {flags: FlagFlush | FlagFUA, sector: 5, n: 1, fill: 9}, mark("m")},
			mark: "m", volatile: true, keep: []int{0, 1}, dropped: []int{}, lastFlush: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, ss := range []uint32{512, 4096} {
				l, err := ReadLog(bytes.NewReader(buildLog(ss, tt.recs)))
				if err != nil {
					t.Fatal(err)
				}
				at, err := l.FindMark(tt.mark)
				if err != nil {
					t.Fatal(err)
				}
				c, err := l.CutAt(at, tt.volatile)
				if err != nil {
					t.Fatal(err)
				}
				if got := indexes(c.Entries); !slices.Equal(got, tt.keep) {
					t.Errorf("ss %d: kept %v, want %v", ss, got, tt.keep)
				}
				if got := indexes(c.Dropped); !slices.Equal(got, tt.dropped) {
					t.Errorf("ss %d: dropped %v, want %v", ss, got, tt.dropped)
				}
				if c.LastFlush != tt.lastFlush {
					t.Errorf("ss %d: last flush %d, want %d", ss, c.LastFlush, tt.lastFlush)
				}
			}
		})
	}
}

func TestReadLogErrors(t *testing.T) {
	good := buildLog(512, []rec{w(0, 1, 1), mark("m"), mark("m")})
	l, err := ReadLog(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.FindMark("m"); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate mark: %v", err)
	}
	if _, err := l.FindMark("x"); err == nil {
		t.Error("missing mark found")
	}
	bad := slices.Clone(good)
	bad[0] ^= 1
	if _, err := ReadLog(bytes.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "magic") {
		t.Errorf("bad magic: %v", err)
	}
	if _, err := ReadLog(bytes.NewReader(good[:600])); err == nil {
		t.Error("truncated log parsed")
	}
}

// TestReplay replays a synthetic log onto a file and checks each block.
func TestReplay(t *testing.T) {
	const ss = 512
	recs := []rec{
		w(0, 2, 0xa1), w(4, 1, 0xa2), flush(), // durable
		discard(1, 1), fua(6, 1, 0xa3), // discard lost, FUA kept
		w(4, 1, 0xa4), mark("m1"), // overwrite lost at m1
		flush(), w(7, 1, 0xa5), mark("m2"),
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "log")
	if err := os.WriteFile(logPath, buildLog(ss, recs), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		mark     string
		volatile bool
		want     []byte // one fill byte per block 0..7
	}{
		{"m1", true, []byte{0xa1, 0xa1, 0, 0, 0xa2, 0, 0xa3, 0}},
		{"m1", false, []byte{0xa1, 0, 0, 0, 0xa4, 0, 0xa3, 0}},
		{"m2", true, []byte{0xa1, 0, 0, 0, 0xa4, 0, 0xa3, 0}},
		{"m2", false, []byte{0xa1, 0, 0, 0, 0xa4, 0, 0xa3, 0xa5}},
	} {
		dev := filepath.Join(dir, "dev")
		// Garbage first: -zero must clear what an earlier replay left.
		if err := os.WriteFile(dev, bytes.Repeat([]byte{0xff}, 8*ss), 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"-log", logPath, "-dev", dev, "-mark", tt.mark, "-zero"}
		if tt.volatile {
			args = append(args, "-volatile")
		}
		var out bytes.Buffer
		if err := replay(args, &out); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(dev)
		if err != nil {
			t.Fatal(err)
		}
		for i, fill := range tt.want {
			if !bytes.Equal(got[i*ss:(i+1)*ss], bytes.Repeat([]byte{fill}, ss)) {
				t.Errorf("%s volatile=%v: block %d holds %#x..., want %#x (%s)", tt.mark, tt.volatile, i, got[i*ss], fill, out.String())
			}
		}
	}
	var out bytes.Buffer
	if err := list([]string{"-log", logPath}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "marks: m1 m2") || !strings.Contains(out.String(), "DISCARD") {
		t.Errorf("list:\n%s", out.String())
	}
}
