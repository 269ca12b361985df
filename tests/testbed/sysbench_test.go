// SPDX-License-Identifier: Apache-2.0

package testbed

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// sysbenchOut is sysbench 1.0.20's report with the given transactions line
// and latency section, the rest as in a real run.
func sysbenchOut(transactions, latency string) string {
	return `sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)

Threads started!

SQL statistics:
    queries performed:
        read:                            5852
        write:                           1672
        other:                           836
        total:                           8360
` + transactions + `
    queries:                             8360   (823.26 per sec.)
    ignored errors:                      0      (0.00 per sec.)
    reconnects:                          0      (0.00 per sec.)

General statistics:
    total time:                          10.1541s
    total number of events:              418

` + latency + `
Threads fairness:
    events (avg/stddev):           104.5000/3.20
    execution time (avg/stddev):   10.1234/0.03
`
}

const (
	sbTx      = `    transactions:                        418    (41.16 per sec.)`
	sbLatency = `Latency (ms):
         min:                                   30.12
         avg:                                   96.87
         max:                                  410.55
         95th percentile:                      183.21
         sum:                                40493.55
`
)

func TestParseSysbench(t *testing.T) {
	base := SysbenchResult{
		Transactions: 418, TPS: 41.16, Queries: 8360, QPS: 823.26,
		Runtime:    10154100 * time.Microsecond,
		LatencyMin: 30120 * time.Microsecond, LatencyAvg: 96870 * time.Microsecond,
		LatencyMax: 410550 * time.Microsecond, Percentile: 95, LatencyPct: 183210 * time.Microsecond,
	}
	p99 := base
	p99.Percentile, p99.LatencyPct = 99, 250*time.Millisecond
	zero := base
	zero.Transactions, zero.TPS = 0, 0

	tests := []struct {
		name    string
		out     string
		want    SysbenchResult
		wantErr []string // substrings of the error; nil means success
	}{
		{name: "95th", out: sysbenchOut(sbTx, sbLatency), want: base},
		{
			name: "99th",
			out:  sysbenchOut(sbTx, strings.Replace(sbLatency, "95th percentile:                      183.21", "99th percentile:                      250.00", 1)),
			want: p99,
		},
		{
			name: "no transactions",
			out:  sysbenchOut(`    transactions:                        0      (0.00 per sec.)`, sbLatency),
			want: zero,
		},
		{
			name:    "missing fields",
			out:     sysbenchOut("", strings.Replace(sbLatency, "         max:                                  410.55\n", "", 1)),
			wantErr: []string{`no "transactions:", "latency max:" lines`, `output: "sysbench 1.0.20`},
		},
		{
			name:    "malformed count",
			out:     sysbenchOut(`    transactions:                        4x8    (41.16 per sec.)`, sbLatency),
			wantErr: []string{`line "transactions:`, "count"},
		},
		{
			name:    "malformed rate",
			out:     sysbenchOut(`    transactions:                        418    (41.16/s)`, sbLatency),
			wantErr: []string{`line "transactions:`, "per sec."},
		},
		{
			name:    "malformed latency",
			out:     sysbenchOut(sbTx, strings.Replace(sbLatency, "96.87", "-96.87", 1)),
			wantErr: []string{`line "avg:`, "not a non-negative decimal"},
		},
		{
			name:    "percentile disabled",
			out:     sysbenchOut(sbTx, strings.Replace(sbLatency, "95th percentile:                      183.21", "percentile stats:               disabled", 1)),
			wantErr: []string{"--percentile=N"},
		},
		{
			name:    "latency unit",
			out:     sysbenchOut(sbTx, strings.Replace(sbLatency, "(ms)", "(us)", 1)),
			wantErr: []string{`"Latency (us):"`, "milliseconds"},
		},
		{
			name:    "two runs",
			out:     sysbenchOut(sbTx, sbLatency) + sysbenchOut(sbTx, sbLatency),
			wantErr: []string{`"transactions:" line appears twice`},
		},
		{
			name:    "fatal",
			out:     "sysbench 1.0.20\n\nFATAL: unable to connect to MySQL server on socket '/tmp/x', aborting...\n",
			wantErr: []string{`no "transactions:"`, `"FATAL: unable to connect`},
		},
		{name: "empty", out: " \n", wantErr: []string{"empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSysbench(tt.out)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if got != tt.want {
					t.Errorf("got  %+v\nwant %+v", got, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, parsed %+v", got)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

// The golden file is sysbench 1.0.20 (Debian bookworm) against MariaDB
// 10.11 on a Unix socket:
//
//	sysbench oltp_read_write --db-driver=mysql --mysql-socket=... \
//	    --mysql-user=root --mysql-db=sbtest --tables=1 --table-size=1000 \
//	    --threads=4 --time=3 --percentile=95 run
//
// Four threads on 1000 rows deadlock now and then, hence the ignored errors.
func TestParseSysbenchGolden(t *testing.T) {
	got, err := ParseSysbench(string(readTestdata(t, "sysbench-oltp_read_write.txt")))
	if err != nil {
		t.Fatal(err)
	}
	want := SysbenchResult{
		Transactions: 5492, TPS: 1828.05, Queries: 110482, QPS: 36774.65, Errors: 39,
		Runtime:    3003400 * time.Microsecond,
		LatencyMin: 720 * time.Microsecond, LatencyAvg: 2180 * time.Microsecond,
		LatencyMax: 7560 * time.Microsecond, Percentile: 95, LatencyPct: 3360 * time.Microsecond,
	}
	if got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestParseSysbenchIntervals(t *testing.T) {
	out := `sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)

Running the test with following options:
Number of threads: 8
Report intermediate results every 1 second(s)

Threads started!

[ 1s ] thds: 8 tps: 20.99 qps: 437.73 (r/w/o: 307.86/87.95/41.92) lat (ms,95%): 142.39 err/s: 0.00 reconn/s: 0.00
[ 2s ] thds: 8 tps: 0.00 qps: 0.00 (r/w/o: 0.00/0.00/0.00) lat (ms,95%): 0.00 err/s: 0.00 reconn/s: 0.00
[ 3s ] thds: 8 tps: 31.00 qps: 620.04 (r/w/o: 434.03/124.01/62.00) lat (ms,95%): 3040.14 err/s: 0.00 reconn/s: 0.00
SQL statistics:
    transactions:                        52     (17.15 per sec.)
`
	got, err := ParseSysbenchIntervals(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []SysbenchInterval{
		{At: time.Second, TPS: 20.99, P95: 142390 * time.Microsecond},
		{At: 2 * time.Second},
		{At: 3 * time.Second, TPS: 31, P95: 3040140 * time.Microsecond},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"[ xs ] thds: 8 tps: 1 lat (ms,95%): 1\n", "[ 1s ] thds: 8 qps: 1\n", "[ 1s ] thds: 8 tps: x lat (ms,95%): 1\n", "[ 1 ] tps: 1\n"} {
		if _, err := ParseSysbenchIntervals(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
