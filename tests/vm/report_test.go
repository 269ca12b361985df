// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"strings"
	"testing"
)

// TestFailureExcerpts checks the helpers that cut a failed tool's output
// down to what says why it failed; they run on the host.
func TestFailureExcerpts(t *testing.T) {
	ginkgo := strings.Join([]string{
		"• [0.512 seconds]",
		"Node Service should work",
		"------------------------------",
		"• [FAILED] [120.004 seconds]",
		"Node Service [It] should work",
		"  [FAILED] rpc error: code = DeadlineExceeded desc = device not ready",
		"  In [It] at: node.go:123",
		"------------------------------",
		"• [0.200 seconds]",
		"Controller Service should delete",
		"------------------------------",
		"Summarizing 1 Failure:",
		"  [FAIL] Node Service [It] should work",
		"Ran 38 of 103 Specs in 190.1 seconds",
		"FAIL! -- 37 Passed | 1 Failed | 1 Pending | 64 Skipped",
	}, "\n")
	fio := strings.Join([]string{
		"live: (groupid=0, jobs=1): err=84 (file:io_u.c:2200, func=io_u_queued_complete, error=Invalid or incomplete multibyte or wide character): pid=900",
		"  write: IOPS=700, BW=2800KiB/s",
		"  lat (usec): min=50, max=90000",
		"  cpu          : usr=1.0%, sys=3.1%",
		"  IO depths    : 1=0.1%, 2=0.1%, 4=99.9%",
		"  submit    : 0=0.0%, 4=100.0%",
		"  complete  : 0=0.0%, 4=100.0%",
		"  issued rwts: total=1000,2000,0,0",
		"  latency   : target=0, window=0",
		"crc32c: verify failed at file /dev/mapper/tc-db offset 4096, length 4096",
		"Disk stats (read/write):",
		"  dm-3: ios=100/200, merge=0/0, ticks=1/2, in_queue=3, util=0.5%",
	}, "\n")
	tests := []struct {
		name     string
		got      string
		want     []string
		wantNone []string
	}{
		{
			name:     "ginkgo: the failed spec and the summary",
			got:      ginkgoFailures(ginkgo),
			want:     []string{"device not ready", "node.go:123", "Summarizing 1 Failure", "37 Passed | 1 Failed"},
			wantNone: []string{"Controller Service should delete", "0.512 seconds"},
		},
		{
			name: "ginkgo: nothing failed",
			got:  ginkgoFailures("• [0.5 seconds]\nNode Service should work\n"),
			want: []string{"no [FAILED] spec"},
		},
		{
			name:     "fio: the job's error and the verify failure",
			got:      fioErrors(fio),
			want:     []string{"err=84", "verify failed at file /dev/mapper/tc-db offset 4096"},
			wantNone: []string{"dm-3: ios", "latency   : target"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, w := range tt.want {
				if !strings.Contains(tt.got, w) {
					t.Errorf("excerpt lacks %q:\n%s", w, tt.got)
				}
			}
			for _, w := range tt.wantNone {
				if strings.Contains(tt.got, w) {
					t.Errorf("excerpt keeps %q:\n%s", w, tt.got)
				}
			}
		})
	}
}
