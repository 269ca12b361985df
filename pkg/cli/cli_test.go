// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/writeback"
)

func TestParseSize(t *testing.T) {
	cases := []struct {
		in        string
		allowZero bool
		want      uint64
		err       string
	}{
		{"10G", false, 10 << 30, ""},
		{"512M", false, 512 << 20, ""},
		{"512MiB", false, 512 << 20, ""},
		{"1T", false, 1 << 40, ""},
		{"0", true, 0, ""},
		{"0", false, 0, "greater than zero"},
		{"ten", false, 0, "use a size like"},
		{"-5G", false, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSize("size", tc.in, tc.allowZero)
			if tc.in == "-5G" {
				if err == nil {
					t.Fatalf("negative size accepted: %d", got)
				}
				return
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--size") {
					t.Fatalf("err = %v, want one naming --size and saying %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestCommandValidation checks input errors that need no device: they are
// reported before the engine (and device-mapper) is touched, so they work
// on a host without device-mapper.
func TestCommandValidation(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"volume", "create", "Bad_Name", "--size", "1G"}, `invalid volume name "Bad_Name"`},
		{[]string{"volume", "create", strings.Repeat("a", 49), "--size", "1G"}, "48"},
		{[]string{"volume", "create", "db", "--size", "1G"}, "mode writeback needs --write-cache"},
		{[]string{"volume", "create", "db", "--size", "lots", "--write-cache", "1G"}, "invalid --size"},
		{[]string{"volume", "create", "db", "--size", "1G", "--write-cache", "1G", "--mode", "sideways"}, "sideways"},
		{[]string{"volume", "create", "db"}, `required flag(s) "size" not set`},
		{[]string{"volume", "set-mode", "db", "fast"}, "fast"},
		{[]string{"pool", "create", "p", "--ssd", "/dev/x", "--raid10", "/dev/a,/dev/b,/dev/c"}, "even number of disks, at least 4"},
		{[]string{"pool", "create", "p", "--ssd", "/dev/x", "--origin", "/dev/y", "--raid10", "/dev/a,/dev/b,/dev/c,/dev/d"}, "none of the others can be"},
		{[]string{"-o", "xml", "volume", "list"}, `invalid --output "xml"`},
		{[]string{"volume", "create", "db", "--size", "1G", "--write-cache", "1G", "--block-size", "3000"}, "invalid --block-size 3000"},
		{[]string{"volume", "create", "db", "--size", "1G", "--write-cache", "1G", "--pool", "Bad_Pool"}, `--pool: invalid pool name "Bad_Pool"`},
		{[]string{"pool", "create", "p"}, "give --ssd for the cache slices, --origin or --raid10 for the data, or both"},
		{[]string{"volume", "adopt", "db", "--write-cache", "1G"}, `at least one of the flags in the group [device shared-origin] is required`},
		{[]string{"volume", "adopt", "db", "--device", "/dev/md0", "--shared-origin", "san/lun0", "--write-cache", "1G"}, "none of the others can be"},
		{[]string{"volume", "adopt", "db", "--shared-origin", "san", "--node", "a", "--write-cache", "1G"}, `--shared-origin "san": want NODE/EXPORT`},
		{[]string{"volume", "adopt", "db", "--shared-origin", "san/lun0", "--write-cache", "1G"}, "--shared-origin needs --node"},
		{[]string{"volume", "adopt", "db", "--shared-origin", "san/lun0", "--node", "a", "--mode", "writethrough"}, "--shared-origin needs --write-cache"},
		{[]string{"volume", "adopt", "db", "--shared-origin", "san/lun0", "--node", "a", "--write-cache", "1G", "--protect", "local"}, "--protect local would leave nothing to fail over to"},
		{[]string{"volume", "adopt", "db", "--shared-origin", "san/lun0", "--node", "a", "--write-cache", "1G"}, "volume adopt --shared-origin works on the cluster: give --etcd-endpoints"},
		{[]string{"volume", "adopt", "db", "--shared-origin", "san/lun0", "--node", "san", "--write-cache", "1G"}, "node san exports lun0: the volume runs on, and keeps its replica on, nodes it is exported to"},
		{[]string{"volume", "adopt", "db", "--shared-origin", "san/lun0", "--node", "a", "--replica-node", "san", "--write-cache", "1G"}, "node san exports lun0"},
		{[]string{"volume", "adopt", "db", "--device", "/dev/md0", "--node", "a", "--write-cache", "1G"}, "--node and --replica-node go with --shared-origin"},
		{[]string{"volume", "adopt", "db", "--device", "md0", "--write-cache", "1G"}, `--device "md0": give the absolute path`},
		{[]string{"volume", "adopt", "db", "--device", "/dev/md0", "--write-cache", "1G", "--protect", "peer"}, "--protect peer needs --shared-origin"},
		{[]string{"volume", "adopt", "db", "--device", "/dev/md0", "--write-cache", "1G", "--etcd-endpoints", "http://127.0.0.1:1"},
			"volume adopt works on this node's devices and does not take --etcd-endpoints"},
		{[]string{"volume", "adopt", "db", "--device", "/dev/md0"}, "mode writeback needs --write-cache"},
		{[]string{"volume", "detach", "db", "--etcd-endpoints", "http://127.0.0.1:1"}, "volume detach works on this node's devices"},
		{[]string{"pool", "create", "p", "--ssd", "nvme0n1", "--origin", "/dev/y"}, `device "nvme0n1": give an absolute path`},
		{[]string{"volume", "create", "db", "--size", "1G", "--write-cache", "1G", "--read-block-size", "128K"}, "--read-block-size needs --read-cache"},
		{[]string{"volume", "create", "db", "--size", "1G", "--read-cache", "1G", "--mode", "writethrough", "--read-block-size", "96K"},
			`invalid --read-block-size "96K": want a power of two from 32K to 1M`},
		{[]string{"volume", "tune", "db", "--autocommit-ms", "0"}, "autocommit time 0 ms: want 1 to 60000 ms"},
		{[]string{"volume", "tune", "db", "--autocommit-ms", "60001"}, "autocommit time 60001 ms"},
		{[]string{"volume", "tune", "db", "--autocommit-ms", "100", "--reset"}, "[reset autocommit-ms] are set none of the others can be"},
		{[]string{"volume", "tune", "db"}, "--autocommit-ms"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			cmd := NewTidectl(&out, &errb)
			cmd.SetArgs(tc.args)
			code := Execute(t.Context(), cmd, &errb)
			if code == 0 {
				t.Fatalf("exit 0, want failure; stdout %q", out.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("stderr %q does not contain %q", errb.String(), tc.want)
			}
		})
	}
}

func TestProgressPrinter(t *testing.T) {
	var b bytes.Buffer
	p := &progressPrinter{w: &b}
	p.print(engine.Progress{Volume: "db", Phase: "drain", DirtyBlocks: 1000, StartBlocks: 1000, BlockSize: 4096})
	p.print(engine.Progress{Volume: "db", Phase: "drain", DirtyBlocks: 500, StartBlocks: 1000, BlockSize: 4096, BlocksPerSecond: 250, ETA: 2 * time.Second})
	p.print(engine.Progress{Volume: "db", Phase: "drain", DirtyBlocks: 0, StartBlocks: 1000, BlockSize: 4096, BlocksPerSecond: 250})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	// The middle report came within a second of the first: throttled. The
	// final one (0 dirty) always prints.
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), b.String())
	}
	if !strings.Contains(lines[0], "1000 dirty blocks (4000 KiB) left, 0% written back") || !strings.Contains(lines[0], "ETA unknown") {
		t.Errorf("first line: %s", lines[0])
	}
	if !strings.Contains(lines[1], "0 dirty blocks") || !strings.Contains(lines[1], "100% written back") || !strings.Contains(lines[1], "done") {
		t.Errorf("last line: %s", lines[1])
	}
}

func TestCreateRequest(t *testing.T) {
	base := createFlags{size: "1G", writeCache: "256M", readCache: "512M", mode: "writeback", blockSize: 4096}
	cases := []struct {
		name    string
		edit    func(*createFlags)
		wantRBS uint32
		protect pool.Protection
		err     string
	}{
		{"read block size unset", func(*createFlags) {}, 0, "", ""},
		{"128K", func(c *createFlags) { c.readBlockSize = "128K" }, 128 << 10, "", ""},
		{"32KiB", func(c *createFlags) { c.readBlockSize = "32KiB" }, 32 << 10, "", ""},
		{"1M", func(c *createFlags) { c.readBlockSize = "1M" }, 1 << 20, "", ""},
		{"bytes", func(c *createFlags) { c.readBlockSize = "65536" }, 64 << 10, "", ""},
		{"too small", func(c *createFlags) { c.readBlockSize = "16K" }, 0, "", `invalid --read-block-size "16K"`},
		{"too large", func(c *createFlags) { c.readBlockSize = "2M" }, 0, "", `invalid --read-block-size "2M"`},
		{"beyond 32 bits", func(c *createFlags) { c.readBlockSize = "4G" }, 0, "", `invalid --read-block-size "4G"`},
		{"not a power of two", func(c *createFlags) { c.readBlockSize = "96K" }, 0, "", "want a power of two from 32K to 1M"},
		{"zero", func(c *createFlags) { c.readBlockSize = "0" }, 0, "", "invalid --read-block-size \"0\": must be greater than zero"},
		{"not a size", func(c *createFlags) { c.readBlockSize = "big" }, 0, "", "invalid --read-block-size \"big\": use a size like"},
		{"without read cache", func(c *createFlags) { c.readCache, c.readBlockSize = "0", "128K" }, 0, "", "--read-block-size needs --read-cache"},
		{"protect unset: the node chooses", func(*createFlags) {}, 0, "", ""},
		{"protect local", func(c *createFlags) { c.protect = "local" }, 0, pool.ProtectLocal, ""},
		{"protect none", func(c *createFlags) { c.protect = "none" }, 0, pool.ProtectNone, ""},
		{"protect typo", func(c *createFlags) { c.protect = "mirror" }, 0, "", `invalid --protect "mirror": want none, local or peer`},
		{"protect local without write cache", func(c *createFlags) { c.protect, c.writeCache, c.mode = "local", "0", "writethrough" }, 0, "", "--protect local needs --write-cache"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cf := base
			tc.edit(&cf)
			req, err := cf.request("db")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("request = %+v, %v; want error containing %q", req, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			want := pool.VolumeRequest{Name: "db", Size: 1 << 30, WriteCache: 256 << 20, ReadCache: 512 << 20,
				Mode: pool.ModeWriteback, BlockSize: 4096, ReadBlockSize: tc.wantRBS, Protect: tc.protect}
			if req != want {
				t.Fatalf("request = %+v, want %+v", req, want)
			}
		})
	}
}

func TestTuneFlags(t *testing.T) {
	set := func(names ...string) func(string) bool {
		return func(f string) bool { return strings.Contains(" "+strings.Join(names, " ")+" ", " "+f+" ") }
	}
	flags := tuneFlags{high: 40, low: 30, jobs: 8, autocommit: 100}
	u := func(v uint64) *uint64 { return &v }
	i := func(v int) *int { return &v }
	tuned := &pool.Tuning{HighWatermark: i(60), WritebackJobs: u(4)}
	cases := []struct {
		name    string
		flags   tuneFlags
		changed func(string) bool
		cur     *pool.Tuning
		want    *pool.Tuning
		err     string
	}{
		{"autocommit only", flags, set("autocommit-ms"), nil, &pool.Tuning{AutocommitTimeMs: u(100)}, ""},
		{"all", flags, set("high-watermark", "low-watermark", "writeback-jobs", "autocommit-ms"), nil,
			&pool.Tuning{HighWatermark: i(40), LowWatermark: i(30), WritebackJobs: u(8), AutocommitTimeMs: u(100)}, ""},
		{"unnamed knobs are kept", flags, set("autocommit-ms"), tuned,
			&pool.Tuning{HighWatermark: i(60), WritebackJobs: u(4), AutocommitTimeMs: u(100)}, ""},
		{"named knob replaces the current one", tuneFlags{high: 55}, set("high-watermark"), tuned,
			&pool.Tuning{HighWatermark: i(55), WritebackJobs: u(4)}, ""},
		{"kept high below the new low is refused", tuneFlags{low: 70}, set("low-watermark"), tuned, nil, "low watermark 70"},
		{"reset", tuneFlags{reset: true}, set("reset"), tuned, nil, ""},
		{"nothing", flags, set(), tuned, nil, "nothing to set"},
		{"autocommit out of range", tuneFlags{autocommit: 60001}, set("autocommit-ms"), nil, nil, "autocommit time 60001 ms: want 1 to 60000 ms"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var before *pool.Tuning
			if tc.cur != nil {
				c := *tc.cur
				before = &c
			}
			got, err := tc.flags.tuning(tc.changed, tc.cur)
			if !tc.cur.Equal(before) {
				t.Errorf("tuning changed the current tuning in place: %+v, was %+v", tc.cur, before)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("tuning = %+v, %v; want error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) || (got == nil) != (tc.want == nil) {
				t.Fatalf("tuning = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestPrintVolume(t *testing.T) {
	ac, hi := uint64(100), 30
	tuned := engine.VolumeInfo{Name: "db", UUID: "u", Pool: "fast", Mode: pool.ModeWriteback, Device: "/dev/mapper/tc-db",
		SizeBytes: 1 << 30, WriteCacheBytes: 256 << 20, ReadCacheBytes: 512 << 20, BlockSize: 4096, ReadBlockSize: 256 << 10,
		Tuning: &pool.Tuning{HighWatermark: &hi, AutocommitTimeMs: &ac}, State: "inactive"}
	plain := tuned
	plain.Tuning, plain.ReadCacheBytes, plain.ReadBlockSize = nil, 0, 0
	plain.WritebackLimit = &writeback.Limit{Jobs: 16, Source: writeback.SourceOrigin, Reason: "md127 is raid10 of 4 rotating disks",
		HighWatermark: 50, LowWatermark: 10, WatermarkSource: writeback.SourceNode}
	cases := []struct {
		name   string
		v      engine.VolumeInfo
		want   []string
		absent []string
	}{
		{"tuned with read tier", tuned, []string{
			"  tuning:     high watermark 30%, autocommit 100 ms (others: node defaults)\n",
			"Read cache:   512 MiB, block size 256 KiB\n",
		}, nil},
		{"node defaults, no read tier", plain, []string{"  tuning:     node defaults\n",
			"  write-back: at most 16 blocks in flight to the HDDs (origin: md127 is raid10 of 4 rotating disks)\n",
			"  runs:       from 50 % of the write cache in use down to 10 % (node defaults)\n"}, []string{"Read cache"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printVolume(&Globals{Output: "table", Stdout: &out}, localVolume(tc.v, "node1")); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(out.String(), a) {
					t.Errorf("output has %q:\n%s", a, out.String())
				}
			}
		})
	}

	var out bytes.Buffer
	if err := printVolume(&Globals{Output: "json", Stdout: &out}, localVolume(tuned, "node1")); err != nil {
		t.Fatal(err)
	}
	var got struct {
		ReadBlockSize uint32 `json:"read_block_size"`
		Tuning        struct {
			AutocommitTimeMs uint64 `json:"autocommit_time_ms"`
		} `json:"tuning"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || got.ReadBlockSize != 256<<10 || got.Tuning.AutocommitTimeMs != 100 {
		t.Errorf("json = %+v, %v from\n%s", got, err, out.String())
	}
	out.Reset()
	if err := printVolume(&Globals{Output: "json", Stdout: &out}, localVolume(plain, "node1")); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "read_block_size") || strings.Contains(out.String(), "autocommit") {
		t.Errorf("volume without a read tier or tuning prints their keys:\n%s", out.String())
	}
}
