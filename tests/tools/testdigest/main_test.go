// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
	"testing"
)

func TestDigest(t *testing.T) {
	long := []string{"=== RUN   TestLong"}
	for i := 1; i <= 10; i++ {
		long = append(long, fmt.Sprintf("    line %d", i))
	}
	long = append(long, "--- FAIL: TestLong (9.00s)")

	tests := []struct {
		name      string
		log       []string
		head      int
		tail      int
		want      []string
		wantCount int
	}{
		{
			name: "passes and skips print nothing",
			log: []string{
				"=== RUN   TestA", "    a_test.go:1: fine", "--- PASS: TestA (1.00s)",
				"=== RUN   TestB", "--- SKIP: TestB (0.00s)",
			},
			head: 5, tail: 5,
		},
		{
			name: "a failure with subtests and INFO logs",
			log: []string{
				"=== RUN   TestA", "--- PASS: TestA (1.00s)",
				"=== RUN   TestB",
				"=== RUN   TestB/sub",
				"    testing.go:105: time=x level=INFO msg=booted",
				"    b_test.go:7: wrong answer",
				"    --- FAIL: TestB/sub (2.00s)",
				"--- FAIL: TestB (3.00s)",
				"=== RUN   TestC", "--- PASS: TestC (1.00s)",
			},
			head: 5, tail: 5,
			want: []string{
				"=== TestB: --- FAIL: TestB (3.00s)",
				"=== RUN   TestB/sub",
				"    b_test.go:7: wrong answer",
				"    --- FAIL: TestB/sub (2.00s)",
			},
			wantCount: 1,
		},
		{
			name: "a long output keeps its start and end",
			log:  long,
			head: 2, tail: 3,
			want: []string{
				"=== TestLong: --- FAIL: TestLong (9.00s)",
				"    line 1", "    line 2",
				"    [… 5 lines left out: the whole log is in the file …]",
				"    line 8", "    line 9", "    line 10",
			},
			wantCount: 1,
		},
		{
			name: "a long output ends with the test's own lines it left out",
			log: []string{
				"=== RUN   TestMove",
				"    move_test.go:49: etcd formed",
				"    move_test.go:60: provisioned",
				"    move_test.go:150: the publish on b: exit \"1\":",
				"        publish: rpc error: code = NotFound",
				"        desc = node b is not live",
				"    testing.go:44: vm b console tail:",
				"        tc-init: started",
				"    peer_test.go:118: node b: whole daemon.log kept",
				"        [ 36.3] sysrq: Show Blocked State",
				"--- FAIL: TestMove (312.00s)",
			},
			head: 1, tail: 1,
			want: []string{
				"=== TestMove: --- FAIL: TestMove (312.00s)",
				"    move_test.go:49: etcd formed",
				"    [… 7 lines left out: the whole log is in the file …]",
				"        [ 36.3] sysrq: Show Blocked State",
				"=== TestMove: its own lines from the part left out above, the last 3:",
				"    move_test.go:60: provisioned",
				"    move_test.go:150: the publish on b: exit \"1\":",
				"        publish: rpc error: code = NotFound",
				"        desc = node b is not live",
				"    peer_test.go:118: node b: whole daemon.log kept",
			},
			wantCount: 1,
		},
		{
			name: "a test cut off by a timeout",
			log: []string{
				"=== RUN   TestA", "--- PASS: TestA (1.00s)",
				"=== RUN   TestHang", "    hang_test.go:3: waiting",
				"panic: test timed out after 80m0s",
			},
			head: 5, tail: 5,
			want: []string{
				"=== TestHang: did not finish (the log ends)",
				"    hang_test.go:3: waiting",
				"panic: test timed out after 80m0s",
			},
			wantCount: 1,
		},
		{
			name: "parallel tests interleave their output",
			log: []string{
				"=== RUN   TestSeq", "--- PASS: TestSeq (1.00s)",
				"=== RUN   TestA", "=== PAUSE TestA",
				"=== RUN   TestB", "=== PAUSE TestB",
				"=== CONT  TestA", "=== CONT  TestB",
				"    b_test.go:3: b started",
				"=== NAME  TestA", "    a_test.go:3: a started",
				"=== RUN   TestB/sub",
				"    b_test.go:9: wrong answer",
				"    --- FAIL: TestB/sub (2.00s)",
				"=== NAME  TestA", "    a_test.go:5: a done",
				"--- PASS: TestA (5.00s)",
				"--- FAIL: TestB (6.00s)",
			},
			head: 5, tail: 5,
			want: []string{
				"=== TestB: --- FAIL: TestB (6.00s)",
				"    b_test.go:3: b started",
				"=== RUN   TestB/sub",
				"    b_test.go:9: wrong answer",
				"    --- FAIL: TestB/sub (2.00s)",
			},
			wantCount: 1,
		},
		{
			name: "a binary that died before its result line",
			log: []string{
				"=== RUN   TestDied", "    died_test.go:3: started",
				"=== RUN   TestNext", "--- PASS: TestNext (1.00s)",
			},
			head: 5, tail: 5,
			want: []string{
				"=== TestDied: did not finish",
				"    died_test.go:3: started",
			},
			wantCount: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			n, err := digest(strings.NewReader(strings.Join(tt.log, "\n")+"\n"), &out, tt.head, tt.tail)
			if err != nil {
				t.Fatal(err)
			}
			if n != tt.wantCount {
				t.Errorf("digest printed %d tests, want %d", n, tt.wantCount)
			}
			want := ""
			if len(tt.want) > 0 {
				want = strings.Join(tt.want, "\n") + "\n"
			}
			if out.String() != want {
				t.Errorf("digest printed:\n%s\nwant:\n%s", out.String(), want)
			}
		})
	}
}
