// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseMove(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      moveFigure
		err       string
	}{
		{name: "handed over", out: "volume moved on bench: stopping for the move\nvolume moved runs on node peer: handed over in 2.9 s (I/O stopped from the owner's stop to this node running it); 3712 dirty blocks kept in its write cache\n",
			want: moveFigure{handover: 2900 * time.Millisecond, dirty: 3712}},
		{name: "nothing dirty", out: "volume moved runs on node peer: handed over in 2.9 s (I/O stopped from the owner's stop to this node running it); 0 dirty blocks kept in its write cache\n",
			err: "kept no dirty block"},
		{name: "no stop seen", out: "volume moved runs on node peer: handed over; 12 dirty blocks kept in its write cache\n",
			err: "no handover time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMove(tc.out)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("parseMove: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseMove = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestWriteMoves(t *testing.T) {
	var b strings.Builder
	err := writeMoves(&b, []moveFigure{
		{from: "bench", to: "peer", handover: 3 * time.Second, dirty: 10},
		{from: "peer", to: "bench", handover: 5 * time.Second, dirty: 20},
		{from: "bench", to: "peer", handover: 2 * time.Second, dirty: 30},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| bench → peer | 3.0 s | 10 |", "| peer → bench | 5.0 s | 20 |", "median 3.0 s (2.0–5.0 s)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
