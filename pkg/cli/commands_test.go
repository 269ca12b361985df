// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/etcdserver/etcdtest"
	"github.com/tidecache/tidecache/pkg/mdraid"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
	"sigs.k8s.io/yaml"
)

// etcdEndpoint is a real single-member etcd for the cluster-mode tests;
// each test uses its own key prefix.
var etcdEndpoint string

func TestMain(m *testing.M) {
	os.Exit(etcdtest.RunWithMember(m, func(eps []string) { etcdEndpoint = eps[0] }))
}

var prefixSeq atomic.Int64

// cluster is one test's view of the shared etcd: a store under a prefix of
// its own, and the tidectl flags that select it.
type cluster struct {
	st    *store.Store
	flags []string
}

func newCluster(t *testing.T) cluster {
	t.Helper()
	prefix := fmt.Sprintf("/cli-test/%d/v1/", prefixSeq.Add(1))
	cfg := store.DefaultConfig()
	cfg.Endpoints = []string{etcdEndpoint}
	cfg.Prefix = prefix
	st, err := store.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return cluster{st: st, flags: []string{"--etcd-endpoints", etcdEndpoint, "--etcd-prefix", prefix}}
}

// liveNode registers a node with the named pools, as its daemon would,
// until the test ends.
func (c cluster) liveNode(t *testing.T, name string, pools ...string) {
	t.Helper()
	n := api.Node{Name: name}
	for _, p := range pools {
		n.Pools = append(n.Pools, api.PoolInventory{Name: p})
	}
	c.register(t, n)
}

// register registers n, as its daemon would, until the test ends.
func (c cluster) register(t *testing.T, n api.Node) {
	t.Helper()
	reg, err := c.st.Register(t.Context(), n, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close(context.Background()) })
}

// args returns the tidectl arguments that select the cluster, then args.
func (c cluster) args(args ...string) []string {
	return append(append([]string{}, c.flags...), args...)
}

// fakeNode is the engine of a node with volumes, for local-mode commands
// on a host without device-mapper. It records tuning changes.
type fakeNode struct {
	vols     []engine.VolumeInfo
	pools    []engine.PoolInfo
	checkErr error
	tuned    *pool.Tuning
}

func (f *fakeNode) CreateVolume(context.Context, string, pool.VolumeRequest) (engine.VolumeInfo, error) {
	return engine.VolumeInfo{}, errors.New("fake: create not supported")
}
func (f *fakeNode) Volumes(context.Context) ([]engine.VolumeInfo, error) { return f.vols, nil }
func (f *fakeNode) Volume(_ context.Context, name string) (engine.VolumeInfo, error) {
	for _, v := range f.vols {
		if v.Name == name {
			return v, nil
		}
	}
	return engine.VolumeInfo{}, volumeNotFound(name)
}
func (f *fakeNode) Pools(context.Context) ([]engine.PoolInfo, error) { return f.pools, nil }
func (f *fakeNode) DeleteVolume(context.Context, string, bool) error { return errors.New("fake") }
func (f *fakeNode) SetMode(context.Context, string, pool.Mode, engine.ProgressFunc) error {
	return errors.New("fake")
}
func (f *fakeNode) Flush(context.Context, string, engine.ProgressFunc) (uint64, error) { return 0, nil }
func (f *fakeNode) CheckVolume(context.Context, string) error                          { return f.checkErr }
func (f *fakeNode) RepairVolume(context.Context, string) ([]string, error)             { return nil, nil }
func (f *fakeNode) SetTuning(_ context.Context, _ string, t *pool.Tuning) (bool, error) {
	f.tuned = t
	return true, nil
}
func (f *fakeNode) AdoptVolume(context.Context, engine.AdoptRequest) (engine.VolumeInfo, error) {
	return engine.VolumeInfo{}, errors.New("fake")
}
func (f *fakeNode) DetachVolume(context.Context, string, engine.ProgressFunc) error {
	return errors.New("fake")
}
func (f *fakeNode) UncacheVolume(context.Context, string, engine.ProgressFunc) error {
	return errors.New("fake")
}
func (f *fakeNode) ResizeVolume(context.Context, string, uint64) (engine.VolumeInfo, error) {
	return engine.VolumeInfo{}, errors.New("fake")
}
func (f *fakeNode) Close() error { return nil }

// result is one tidectl run.
type result struct {
	code           int
	stdout, stderr string
}

// tidectl runs the tidectl tree in process; node, if not nil, stands in
// for this node's engine.
func tidectl(t *testing.T, node *fakeNode, args ...string) result {
	t.Helper()
	return tidectlEnv(t, node, nil, args...)
}

// tidectlEnv is tidectl with env as its whole environment; nil: the
// process's.
func tidectlEnv(t *testing.T, node *fakeNode, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	g := &Globals{Stdout: &out, Stderr: &errb}
	if env != nil {
		g.getenv = func(k string) string { return env[k] }
	}
	if node != nil {
		g.openNode = func() (nodeEngine, error) { return node, nil }
	} else {
		g.openNode = func() (nodeEngine, error) { return nil, errors.New("no engine in this test") }
	}
	cmd := newTidectl(g)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	code := Execute(ctx, cmd, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func u64(v uint64) *uint64 { return &v }
func i(v int) *int         { return &v }

// dbVolume is a writeback volume as a node's engine reports it.
func dbVolume() engine.VolumeInfo {
	wc := &engine.WriteCacheStatus{DirtyBlocks: 10, DirtyBytes: 40960, UsedPercent: 3, ReadHitRatio: 0.5, WriteHitRatio: 0.25}
	wc.Writes, wc.Reads = 100, 50
	return engine.VolumeInfo{Name: "db", UUID: "u-db", Pool: "fast", Mode: pool.ModeWriteback, Device: "/dev/mapper/tc-db",
		SizeBytes: 1 << 30, WriteCacheBytes: 256 << 20, BlockSize: 4096, State: api.StateActive,
		Tuning:     &pool.Tuning{HighWatermark: i(60), AutocommitTimeMs: u64(100)},
		WriteCache: wc, FUAFlush: &dm.FUAFlushStatus{FUAWrites: 3, Flushes: 2}}
}

// TestVolumeJSONOneSchema runs `volume show` and `volume list` with -o json
// in local mode (a node's engine) and in cluster mode (spec and status in
// a real etcd) and checks that they print the same keys: the Volume
// record's, with only the documented omitempty ones missing.
func TestVolumeJSONOneSchema(t *testing.T) {
	c := newCluster(t)
	spec := api.VolumeSpec{Name: "db", Node: "n1", Pool: "fast", SizeBytes: 1 << 30, WriteCacheBytes: 256 << 20, Mode: "writeback"}
	if _, err := c.st.CreateVolumeSpec(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if err := c.st.PutVolumeStatus(t.Context(), api.VolumeStatus{Name: "db", Node: "n1", ObservedRevision: 1, Mode: "writeback",
		State: api.StateActive, DirtyBlocks: 10, DirtyBytes: 40960, ReadHitRatio: 0.5, WriteHitRatio: 0.25, UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	node := &fakeNode{vols: []engine.VolumeInfo{dbVolume()}}

	// Every key the record can print; the ones without omitempty must be
	// in every output.
	all, required := volumeKeys(t)
	for _, format := range []string{"json", "yaml"} {
		for _, args := range [][]string{{"volume", "show", "db"}, {"volume", "list"}} {
			local := tidectl(t, node, append([]string{"-o", format}, args...)...)
			remote := tidectl(t, nil, append(append([]string{"-o", format}, c.flags...), args...)...)
			for name, r := range map[string]result{"local": local, "cluster": remote} {
				if r.code != ExitOK {
					t.Fatalf("%s %v -o %s: exit %d: %s", name, args, format, r.code, r.stderr)
				}
				keys := topKeys(t, format, r.stdout)
				for _, k := range keys {
					if !all[k] {
						t.Errorf("%s %v -o %s prints key %q that is not in the Volume schema", name, args, format, k)
					}
				}
				for k := range required {
					if !slices.Contains(keys, k) {
						t.Errorf("%s %v -o %s lacks required key %q", name, args, format, k)
					}
				}
			}
		}
	}
	// Same values where both modes know them.
	var l, r Volume
	mustJSON(t, tidectl(t, node, "-o", "json", "volume", "show", "db").stdout, &l)
	mustJSON(t, tidectl(t, nil, append(append([]string{"-o", "json"}, c.flags...), "volume", "show", "db")...).stdout, &r)
	if l.Name != r.Name || l.Mode != r.Mode || l.DirtyBlocks != r.DirtyBlocks || l.SizeBytes != r.SizeBytes || l.ReadHitRatio != r.ReadHitRatio || l.WriteHitRatio != r.WriteHitRatio {
		t.Errorf("local %+v\ncluster %+v", l, r)
	}
	if r.SpecRevision == 0 || r.ObservedRevision != 1 || r.Node != "n1" || l.WriteCache == nil {
		t.Errorf("mode-specific fields: local write_cache %v, cluster revisions %d/%d node %q", l.WriteCache, r.ObservedRevision, r.SpecRevision, r.Node)
	}
}

func volumeKeys(t *testing.T) (all, required map[string]bool) {
	all, required = map[string]bool{}, map[string]bool{}
	rt := reflect.TypeOf(Volume{})
	for n := range rt.NumField() {
		f := rt.Field(n)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		all[name] = true
		if opts != "omitempty" {
			required[name] = true
		}
	}
	if len(required) < 15 {
		t.Fatalf("only %d required keys found: %v", len(required), required)
	}
	return all, required
}

// topKeys returns the keys of the first volume in out (an object or a
// list of objects, JSON or YAML).
func topKeys(t *testing.T, format, out string) []string {
	t.Helper()
	var v any
	if format == "yaml" {
		b, err := yaml.YAMLToJSON([]byte(out))
		if err != nil {
			t.Fatalf("yaml: %v\n%s", err, out)
		}
		out = string(b)
	}
	mustJSON(t, out, &v)
	if list, ok := v.([]any); ok {
		if len(list) == 0 {
			t.Fatalf("empty list")
		}
		v = list[0]
	}
	obj, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("not an object: %s", out)
	}
	var keys []string
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("parse %q: %v", s, err)
	}
}

// TestExitCodes checks the documented exit statuses: usage errors are 2
// and touch nothing, a drifted volume is 3, a check that cannot run is 1.
func TestExitCodes(t *testing.T) {
	c := newCluster(t)
	drift := errors.Join(&engine.DriftError{Device: "tc-db", Want: "0 8 fuaflush 252:1", Got: "0 8 linear 252:1 0"})
	cases := []struct {
		name  string
		node  *fakeNode
		args  []string
		code  int
		about string
	}{
		{"ok", &fakeNode{vols: []engine.VolumeInfo{dbVolume()}}, []string{"volume", "check", "db"}, ExitOK, "matches its layout"},
		{"drift found", &fakeNode{vols: []engine.VolumeInfo{dbVolume()}, checkErr: drift}, []string{"volume", "check", "db"}, ExitFound, "has drifted"},
		{"check cannot run", &fakeNode{checkErr: errors.New("scan: permission denied")}, []string{"volume", "check", "db"}, ExitError, "permission denied"},
		{"unknown command", nil, []string{"volume", "frobnicate"}, ExitUsage, "unknown command"},
		{"unknown flag", nil, []string{"volume", "list", "--colour"}, ExitUsage, "unknown flag: --colour"},
		{"missing argument", nil, []string{"volume", "show"}, ExitUsage, "accepts 1 arg(s), received 0"},
		{"required flag", nil, []string{"volume", "create", "db"}, ExitUsage, `required flag(s) "size" not set`},
		{"bad value", nil, []string{"volume", "create", "db", "--size", "lots"}, ExitUsage, "invalid --size"},
		{"bad flag type", nil, []string{"volume", "create", "db", "--size", "1G", "--block-size", "big"}, ExitUsage, "invalid argument"},
		{"bad mode", nil, []string{"volume", "set-mode", "db", "fast"}, ExitUsage, `invalid mode "fast"`},
		{"exclusive flags", nil, []string{"volume", "tune", "db", "--reset", "--autocommit-ms", "5"}, ExitUsage, "none of the others can be"},
		{"local-only command in cluster mode", nil, c.args("volume", "flush", "db"), ExitUsage, "volume flush works on this node's devices and does not take --etcd-endpoints"},
		{"tune in cluster mode", nil, c.args("volume", "tune", "db", "--autocommit-ms", "100"), ExitUsage, "use `tidectl policy set`"},
		{"pool create in cluster mode", nil, c.args("pool", "create", "fast", "--ssd", "/dev/nvme0n1", "--origin", "/dev/md0"), ExitUsage, "pool create works on this node's devices"},
		{"an unknown pool of the cluster", nil, c.args("pool", "show", "nosuch"), ExitError, "no live node has a pool named nosuch"},
		{"cluster-only command locally", nil, []string{"node", "list"}, ExitUsage, "node list works on the cluster: give --etcd-endpoints"},
		{"unknown volume", nil, c.args("volume", "show", "nosuch"), ExitError, "volume nosuch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tidectl(t, tc.node, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.about) {
				t.Fatalf("tidectl %s: exit %d, want %d with %q\nstdout %s\nstderr %s", strings.Join(tc.args, " "), r.code, tc.code, tc.about, r.stdout, r.stderr)
			}
		})
	}

	t.Run("check -o json lists the drift", func(t *testing.T) {
		r := tidectl(t, &fakeNode{vols: []engine.VolumeInfo{dbVolume()}, checkErr: drift}, "-o", "json", "volume", "check", "db")
		var res checkResult
		mustJSON(t, r.stdout, &res)
		if r.code != ExitFound || !res.Drifted || len(res.Drift) != 1 || res.Drift[0].Device != "tc-db" {
			t.Fatalf("exit %d, %+v", r.code, res)
		}
	})
}

// TestClusterInputErrors checks that unknown nodes and pools are refused
// before a spec is written, and that policy errors name flags.
func TestClusterInputErrors(t *testing.T) {
	c := newCluster(t)
	c.liveNode(t, "n1", "fast")
	cl := c.args
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown node", cl("volume", "create", "db", "--size", "1G", "--write-cache", "64M", "--node", "nosuch"), ExitUsage, "--node nosuch: no such live node (live nodes: n1)"},
		{"unknown pool on a node", cl("volume", "create", "db", "--size", "1G", "--write-cache", "64M", "--node", "n1", "--pool", "slow"), ExitUsage, "--pool slow: node n1 has no pool of that name"},
		{"unknown pool anywhere", cl("volume", "create", "db", "--size", "1G", "--write-cache", "64M", "--pool", "slow"), ExitUsage, "--pool slow: no live node has a pool"},
		{"drain of an unknown node", cl("node", "drain", "nosuch"), ExitUsage, "node nosuch: no such node"},
		{"policy error names the flag", cl("policy", "set", "p", "--wear-threshold", "150"), ExitUsage, "--wear-threshold 150: want 1 to 100"},
		{"policy watermarks name the flags", cl("policy", "set", "p", "--high-watermark", "20", "--low-watermark", "30"), ExitUsage, "--low-watermark 30 is above --high-watermark 20"},
		{"policy mode", cl("policy", "set", "p", "--mode", "fast"), ExitUsage, `--mode: invalid mode "fast"`},
		{"policy reprotect-after names the flag", cl("policy", "set", "p", "--reprotect-after", "-1m"), ExitUsage, "--reprotect-after -1m0s: must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tidectl(t, nil, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, want %d with %q\nstderr %s", r.code, tc.code, tc.want, r.stderr)
			}
			for _, internal := range []string{"wearThresholdPercent", "highWatermark", "lowWatermark", "onSSDError"} {
				if strings.Contains(r.stderr, internal) {
					t.Errorf("error uses the internal name %s: %s", internal, r.stderr)
				}
			}
		})
	}
	specs, _, _, err := c.st.ListVolumeSpecs(t.Context())
	if err != nil || len(specs) != 0 {
		t.Fatalf("refused creates wrote specs: %v, %v", specs, err)
	}

	// The placement that exists is accepted, and drain of a live node too.
	if r := tidectl(t, nil, cl("volume", "create", "db", "--size", "1G", "--write-cache", "64M", "--node", "n1", "--pool", "fast")...); r.code != ExitOK {
		t.Fatalf("create on n1/fast: exit %d: %s", r.code, r.stderr)
	}
	if r := tidectl(t, nil, cl("node", "drain", "n1")...); r.code != ExitOK {
		t.Fatalf("drain n1: exit %d: %s", r.code, r.stderr)
	}
	ns, _, err := c.st.GetNodeSpec(t.Context(), "n1")
	if err != nil || !ns.Drain {
		t.Fatalf("node spec after drain: %+v, %v", ns, err)
	}
	// A node that is down but has a spec is known: undrain is accepted.
	if _, err := c.st.PutNodeSpec(t.Context(), api.NodeSpec{Name: "gone", Drain: true}, 0); err != nil {
		t.Fatal(err)
	}
	if r := tidectl(t, nil, cl("node", "undrain", "gone")...); r.code != ExitOK {
		t.Fatalf("undrain gone: exit %d: %s", r.code, r.stderr)
	}
	if ns, _, err := c.st.GetNodeSpec(t.Context(), "gone"); err != nil || ns.Drain {
		t.Fatalf("node spec after undrain: %+v, %v", ns, err)
	}
}

// TestClusterResize: `volume resize` in cluster mode writes the larger
// size into the spec (nothing for the same size), refuses a smaller one
// and an unknown volume, and with --wait returns once the node's status
// reports the size.
func TestClusterResize(t *testing.T) {
	c := newCluster(t)
	cl := c.args
	if _, err := c.st.CreateVolumeSpec(t.Context(), api.VolumeSpec{Name: "db", Node: "n1", Pool: "fast", SizeBytes: 1 << 30, Mode: "passthrough"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		want     string // in stdout and stderr
		wantSize uint64
	}{
		{"grow", cl("volume", "resize", "db", "--size", "2G"), ExitOK, "size 2 GiB written", 2 << 30},
		{"the same again", cl("volume", "resize", "db", "--size", "2G"), ExitOK, "volume db: size 2 GiB written; add --wait", 2 << 30},
		{"shrink", cl("volume", "resize", "db", "--size", "1G"), ExitError, "tidecache only grows volumes", 2 << 30},
		{"unknown volume", cl("volume", "resize", "nosuch", "--size", "1G"), ExitError, "volume nosuch: volume not found", 2 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tidectl(t, nil, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
				t.Fatalf("exit %d, want %d with %q\nstdout %s\nstderr %s", r.code, tc.code, tc.want, r.stdout, r.stderr)
			}
			if spec, _, err := c.st.GetVolumeSpec(t.Context(), "db"); err != nil || spec.SizeBytes != tc.wantSize {
				t.Fatalf("spec size %d (%v), want %d", spec.SizeBytes, err, tc.wantSize)
			}
		})
	}

	// --wait: the node reports the new size a moment later.
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, meta, _ := c.st.GetVolumeSpec(context.Background(), "db")
		_ = c.st.PutVolumeStatus(context.Background(), api.VolumeStatus{Name: "db", Node: "n1", ObservedRevision: meta.ModRevision,
			Mode: "passthrough", State: api.StateActive, SizeBytes: 3 << 30, UpdatedAt: time.Now().UTC()})
	}()
	r := tidectl(t, nil, cl("volume", "resize", "db", "--size", "3G", "--wait", "--timeout", "20s")...)
	if r.code != ExitOK || !strings.Contains(r.stdout, "volume db is now 3 GiB") {
		t.Fatalf("resize --wait: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

// TestClusterWaitNoProgressWhenRetrying: a node that retries a change
// failing the same way (creating, then the error, again and again) makes
// no progress: --wait gives up after --timeout, naming the error, instead
// of taking each flip for progress and waiting forever (seen in the
// replicated bench run, a volume that did not fit its pool's SSD).
func TestClusterWaitNoProgressWhenRetrying(t *testing.T) {
	c := newCluster(t)
	if _, err := c.st.CreateVolumeSpec(t.Context(), api.VolumeSpec{Name: "db", Node: "n1", Pool: "fast", SizeBytes: 1 << 30, Mode: "passthrough"}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			_, meta, err := c.st.GetVolumeSpec(context.Background(), "db")
			if err != nil {
				continue
			}
			st := api.VolumeStatus{Name: "db", Node: "n1", ObservedRevision: meta.ModRevision, Mode: "passthrough", State: api.StateCreating,
				SizeBytes: 1 << 30, UpdatedAt: time.Now().UTC()}
			if i%2 == 1 {
				st.State, st.Error = api.StateError, "create volume: pool fast: no room for a 2 GiB volume"
			}
			_ = c.st.PutVolumeStatus(context.Background(), st)
		}
	}()
	done := make(chan result, 1)
	go func() {
		done <- tidectl(t, nil, c.args("volume", "resize", "db", "--size", "2G", "--wait", "--timeout", "2s")...)
	}()
	select {
	case r := <-done:
		if r.code == ExitOK || !strings.Contains(r.stderr, "no progress for 2s") || !strings.Contains(r.stderr, "no room for a 2 GiB volume") {
			t.Fatalf("resize --wait --timeout 2s: exit %d, want an error saying no progress and the node's error\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
		}
	case <-time.After(8 * time.Second):
		// A flip seen at every poll held the old wait for 18 s, or for
		// ever: its timer restarted at each change.
		t.Fatal("resize --wait --timeout 2s still waiting after 8 s of a node failing the same way")
	}
}

// TestTuneKeepsUnnamedKnobs runs `volume tune` on a volume with its own
// tuning and checks the engine gets the named knob changed and the others
// kept, like `policy set`.
func TestTuneKeepsUnnamedKnobs(t *testing.T) {
	node := &fakeNode{vols: []engine.VolumeInfo{dbVolume()}}
	if r := tidectl(t, node, "volume", "tune", "db", "--low-watermark", "40"); r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := &pool.Tuning{HighWatermark: i(60), LowWatermark: i(40), AutocommitTimeMs: u64(100)}
	if !node.tuned.Equal(want) {
		t.Fatalf("engine got %+v, want %+v", node.tuned, want)
	}
	if r := tidectl(t, node, "volume", "tune", "db", "--reset"); r.code != ExitOK || node.tuned != nil {
		t.Fatalf("--reset: exit %d, engine got %+v", r.code, node.tuned)
	}
}

// TestCompletion runs cobra's completion entry point the way a shell does
// and checks modes, and volume, node and policy names from etcd and from
// the node's engine.
func TestCompletion(t *testing.T) {
	c := newCluster(t)
	for _, name := range []string{"db", "logs"} {
		if _, err := c.st.CreateVolumeSpec(t.Context(), api.VolumeSpec{Name: name, SizeBytes: 1 << 30, Mode: "writethrough"}); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := c.st.Register(t.Context(), api.Node{Name: "n1", Pools: []api.PoolInventory{{Name: "fast"}}}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(context.Background())
	if _, err := c.st.PutPolicy(t.Context(), api.Policy{Name: "oltp"}, 0); err != nil {
		t.Fatal(err)
	}
	node := &fakeNode{vols: []engine.VolumeInfo{dbVolume()}}
	cl := func(args ...string) []string { return append(append([]string{"__complete"}, c.flags...), args...) }
	cases := []struct {
		name string
		node *fakeNode
		args []string
		want []string
	}{
		{"modes", nil, []string{"__complete", "volume", "set-mode", "db", ""}, []string{"writeback", "writethrough", "passthrough"}},
		{"modes by prefix", nil, []string{"__complete", "volume", "set-mode", "db", "write"}, []string{"writeback", "writethrough"}},
		{"mode flag", nil, []string{"__complete", "volume", "create", "db", "--mode", "p"}, []string{"passthrough"}},
		{"output flag", nil, []string{"__complete", "-o", ""}, []string{"table", "json", "yaml"}},
		{"local volumes", node, []string{"__complete", "volume", "show", ""}, []string{"db"}},
		{"cluster volumes", nil, cl("volume", "delete", ""), []string{"db", "logs"}},
		{"cluster volumes by prefix", nil, cl("volume", "set-mode", "l"), []string{"logs"}},
		{"nodes", nil, cl("node", "drain", ""), []string{"n1"}},
		{"node flag", nil, cl("volume", "create", "x", "--node", ""), []string{"n1"}},
		{"pool flag", nil, cl("volume", "create", "x", "--pool", ""), []string{"fast"}},
		{"policies", nil, cl("policy", "set", ""), []string{"oltp"}},
		{"nothing after the name", nil, cl("volume", "show", "db", ""), nil},
		{"shells", nil, []string{"__complete", "completion", ""}, []string{"bash", "fish", "powershell", "zsh"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tidectl(t, tc.node, tc.args...)
			if r.code != ExitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				if line == "" || strings.HasPrefix(line, ":") {
					continue // the directive line
				}
				got = append(got, strings.SplitN(line, "\t", 2)[0])
			}
			sort.Strings(got)
			want := slices.Clone(tc.want)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Fatalf("completions %q, want %q\n%s", got, want, r.stdout)
			}
		})
	}
}

// TestDrainTracker checks the --wait progress line: share written back,
// rate and ETA.
func TestDrainTracker(t *testing.T) {
	var d drainTracker
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d.observe(t0, 1000)
	if s := d.String(); s != "1000 dirty blocks left, 0% written back, ETA unknown" {
		t.Errorf("start: %s", s)
	}
	d.observe(t0.Add(10*time.Second), 600)
	if s := d.String(); s != "600 dirty blocks left, 40% written back, 40 blocks/s, ETA 15s" {
		t.Errorf("after 10 s: %s", s)
	}
	d.observe(t0.Add(12*time.Second), 1500) // writes arrived: measure again
	if s := d.String(); !strings.HasPrefix(s, "1500 dirty blocks left, 0% written back") {
		t.Errorf("after a rise: %s", s)
	}
}

// TestTidectlLinksNoEtcdServer checks that the tidectl binary's packages
// include no etcd server, raft or bbolt code (tidecached's do), and that
// the pure packages pull in no etcd at all.
func TestTidectlLinksNoEtcdServer(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	deps := func(pkg string) []string {
		out, err := exec.Command(gobin, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	server := func(p string) bool {
		return strings.HasPrefix(p, "go.etcd.io/etcd/server") || strings.HasPrefix(p, "go.etcd.io/raft") ||
			strings.HasPrefix(p, "go.etcd.io/bbolt") || strings.HasSuffix(p, "/pkg/etcdserver")
	}
	var linked []string
	for _, p := range deps("github.com/tidecache/tidecache/cmd/tidectl") {
		if server(p) {
			linked = append(linked, p)
		}
	}
	if len(linked) > 0 {
		t.Errorf("tidectl links etcd server code: %v", linked)
	}
	if !slices.ContainsFunc(deps("github.com/tidecache/tidecache/cmd/tidecached"), server) {
		t.Errorf("tidecached links no etcd server: the check above cannot tell")
	}
}

// TestNodeListFences checks that node list shows fenced nodes, also when
// they are not live, in text and JSON.
func TestNodeListFences(t *testing.T) {
	c := newCluster(t)
	created := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	if _, err := c.st.PutFence(t.Context(), api.Fence{Node: "node-a", Reason: "node gone; failing over db", Volumes: []string{"db"}, CreatedAt: created}, 0); err != nil {
		t.Fatal(err)
	}
	r := tidectl(t, nil, append(c.flags, "node", "list")...)
	if r.code != ExitOK || !strings.Contains(r.stdout, "fenced: node-a since 2026-11-27T03:00:00Z (node gone; failing over db); lifted once it is back and has released db") {
		t.Fatalf("node list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = tidectl(t, nil, append(c.flags, "-o", "json", "node", "list")...)
	if r.code != ExitOK || !strings.Contains(r.stdout, `"node": "node-a"`) || !strings.Contains(r.stdout, `"fences"`) {
		t.Fatalf("node list -o json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestClusterPoolShow checks the cluster's cache pool, pool show with
// --etcd-endpoints: each live node's pools with their SSDs, free space and
// the replicas they keep, a node without SSDs among them, and the totals,
// in text and JSON, all pools or the ones of one name.
func TestClusterPoolShow(t *testing.T) {
	c := newCluster(t)
	for _, n := range []api.Node{
		{Name: "node-a", Pools: []api.PoolInventory{{Name: "fast", OriginFreeBytes: 10 << 30, SSDFreeBytes: 100 << 20}},
			SSDs:     []api.SSDInventory{{Path: "/dev/nvme0n1", Pool: "fast", SizeBytes: 256 << 20}},
			Replicas: []api.ReplicaInventory{{Volume: "logs", Owner: "node-b", Pool: "fast", SizeBytes: 65 << 20, Exported: true}}},
		{Name: "node-b", Pools: []api.PoolInventory{{Name: "fast", OriginFreeBytes: 20 << 30, SSDFreeBytes: 400 << 20}},
			SSDs: []api.SSDInventory{{Path: "/dev/nvme0n1", Pool: "fast", SizeBytes: 256 << 20}, {Path: "/dev/nvme1n1", Pool: "fast", SizeBytes: 256 << 20}}},
		{Name: "node-c", Pools: []api.PoolInventory{{Name: "hdd", OriginFreeBytes: 50 << 30, NoSSDs: true}}},
		// A record that counts its pool's SSDs, which its SSD inventory
		// (disks with health data) does not list.
		{Name: "node-d", Pools: []api.PoolInventory{{Name: "fast", OriginFreeBytes: 5 << 30, SSDFreeBytes: 28 << 20, SSDs: 1, SSDBytes: 128 << 20}}},
	} {
		c.register(t, n)
	}
	r := tidectl(t, nil, c.args("pool", "show")...)
	if r.code != ExitOK {
		t.Fatalf("pool show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"node-a  fast  10 GiB",
		"node-c  hdd   50 GiB       0     -",
		"1 (65 MiB)",
		"cache pool: 4 SSDs on 3 of 4 live nodes, 528 MiB of 896 MiB free; 65 MiB of that space keeps replicas",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("pool show lacks %q:\n%s", want, r.stdout)
		}
	}
	var v clusterPoolView
	mustJSON(t, tidectl(t, nil, append([]string{"-o", "json"}, c.args("pool", "show", "fast")...)...).stdout, &v)
	want := clusterPoolView{
		Pools: []clusterPoolRow{
			{Node: "node-a", Pool: "fast", OriginFreeBytes: 10 << 30, SSDs: 1, SSDBytes: 256 << 20, SSDFreeBytes: 100 << 20, Replicas: 1, ReplicaBytes: 65 << 20},
			{Node: "node-b", Pool: "fast", OriginFreeBytes: 20 << 30, SSDs: 2, SSDBytes: 512 << 20, SSDFreeBytes: 400 << 20},
			{Node: "node-d", Pool: "fast", OriginFreeBytes: 5 << 30, SSDs: 1, SSDBytes: 128 << 20, SSDFreeBytes: 28 << 20},
		},
		Nodes: 4, NodesWithSSDs: 3, SSDs: 4, SSDBytes: 896 << 20, SSDFreeBytes: 528 << 20, ReplicaBytes: 65 << 20,
	}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("pool show fast -o json:\n got %+v\nwant %+v", v, want)
	}
}

// TestClusterSettings: tidectl finds the cluster in TIDECACHE_ETCD_*
// variables and in its config file as well as in flags (a flag wins over
// the environment, the environment over the file); configured endpoints
// leave the node-only commands local; a failed connection names the
// endpoints and where they came from; a bad config file is a usage error.
func TestClusterSettings(t *testing.T) {
	c := newCluster(t)
	prefix := c.flags[3]
	if _, err := c.st.PutPolicy(t.Context(), api.Policy{Name: "default"}, 0); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := func(body string) string {
		p := filepath.Join(dir, fmt.Sprintf("tidectl-%d.yaml", prefixSeq.Add(1)))
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	node := &fakeNode{vols: []engine.VolumeInfo{dbVolume()}}
	good := file("etcdEndpoints: [" + etcdEndpoint + "]\netcdPrefix: " + prefix + "\n")
	dead := "http://127.0.0.1:9" // discard: nothing answers

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string // in stdout, or in stderr when code is set
		code int
	}{
		{"environment", map[string]string{"TIDECACHE_ETCD_ENDPOINTS": etcdEndpoint, "TIDECACHE_ETCD_PREFIX": prefix}, []string{"policy", "list"}, "default", 0},
		{"config file", map[string]string{ConfigFileEnv: good}, []string{"policy", "list"}, "default", 0},
		{"environment over file", map[string]string{ConfigFileEnv: file("etcdEndpoints: [" + dead + "]\n"), "TIDECACHE_ETCD_ENDPOINTS": etcdEndpoint, "TIDECACHE_ETCD_PREFIX": prefix},
			[]string{"policy", "list"}, "default", 0},
		{"flag over environment", map[string]string{"TIDECACHE_ETCD_ENDPOINTS": dead}, append([]string{"policy", "list"}, c.flags...), "default", 0},
		{"configured endpoints leave node commands local", map[string]string{ConfigFileEnv: good}, []string{"volume", "check", "db"}, "matches", 0},
		// It runs on this node: without device-mapper (the host) it
		// cannot open it, with it it finds no such pool; exit 1 either
		// way, never the usage error (2) of an explicit --etcd-endpoints.
		{"configured endpoints leave pool commands local", map[string]string{"TIDECACHE_ETCD_ENDPOINTS": etcdEndpoint}, []string{"pool", "show", "nosuch"}, "error: ", 1},
		{"unreachable, named with its source", map[string]string{"TIDECACHE_ETCD_ENDPOINTS": dead}, []string{"policy", "list"}, dead + " (from TIDECACHE_ETCD_ENDPOINTS)", 1},
		{"unknown key", map[string]string{ConfigFileEnv: file("etcdEndpoint: [x]\n")}, []string{"policy", "list"}, "unknown field", 2},
		{"named file missing", map[string]string{ConfigFileEnv: filepath.Join(dir, "none.yaml")}, []string{"policy", "list"}, "none.yaml", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tidectlEnv(t, node, tc.env, tc.args...)
			got := r.stdout
			if tc.code != 0 {
				got = r.stderr
			}
			if r.code != tc.code || !strings.Contains(got, tc.want) {
				t.Errorf("exit %d (want %d), output lacks %q:\nstdout: %s\nstderr: %s", r.code, tc.code, tc.want, r.stdout, r.stderr)
			}
		})
	}
}

// TestOriginArrayKey: the CSI driver's NodeGetVolumeHealth reads the
// origin array under these keys of volume show's JSON.
func TestOriginArrayKey(t *testing.T) {
	b, err := json.Marshal(Volume{OriginArray: &mdraid.Health{Device: "/dev/md127", Degraded: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"origin_array":{"device":"/dev/md127"`) || !strings.Contains(string(b), `"degraded":1`) {
		t.Errorf("volume JSON %s: want origin_array with device and degraded", b)
	}
}

// TestVolumeImport: volumes made on this node without the cluster get the
// spec that describes them, once; a name another node's spec holds, a
// node that is not live and a call without cluster are refused.
func TestVolumeImport(t *testing.T) {
	c := newCluster(t)
	c.liveNode(t, "n1", "fast")
	cl := c.args
	adopted := engine.VolumeInfo{Name: "mysql", Pool: "fast", Mode: pool.ModeWriteback, State: api.StateActive, SizeBytes: 3 << 30,
		WriteCacheBytes: 64 << 20, BlockSize: 4096, AdoptedDevice: "/dev/md0 (md uuid 3f2a9c41:8b7d6e50:1a2b3c4d:5e6f7a8b)"}
	node := &fakeNode{vols: []engine.VolumeInfo{dbVolume(), adopted}}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"without the cluster", []string{"volume", "import", "--all"}, ExitUsage, "volume import writes cluster specs"},
		{"neither names nor --all", cl("volume", "import", "--node", "n1"), ExitUsage, "name the volumes to import, or give --all"},
		{"a node that is not live", cl("volume", "import", "--all", "--node", "n2"), ExitError, "node n2 is not a live node"},
		{"an unknown volume", cl("volume", "import", "nosuch", "--node", "n1"), ExitError, "nosuch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tidectl(t, node, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, want %d with %q\nstdout %s\nstderr %s", r.code, tc.code, tc.want, r.stdout, r.stderr)
			}
		})
	}

	r := tidectl(t, node, cl("volume", "import", "--all", "--node", "n1")...)
	if r.code != ExitOK || strings.Count(r.stdout, "spec written for node n1") != 2 {
		t.Fatalf("import --all: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	db, _, err := c.st.GetVolumeSpec(t.Context(), "db")
	if err != nil || db.Node != "n1" || db.Pool != "fast" || db.SizeBytes != 1<<30 || db.WriteCacheBytes != 256<<20 || db.Mode != "writeback" || db.Protect != "none" || db.Adopted {
		t.Errorf("spec of db: %+v, %v", db, err)
	}
	my, _, err := c.st.GetVolumeSpec(t.Context(), "mysql")
	if err != nil || !my.Adopted || my.SizeBytes != 0 || my.Node != "n1" || my.WriteCacheBytes != 64<<20 {
		t.Errorf("spec of the adopted mysql: %+v, %v", my, err)
	}
	if r := tidectl(t, node, cl("volume", "import", "--all", "--node", "n1")...); r.code != ExitOK || !strings.Contains(r.stdout, "nothing to import") {
		t.Errorf("second import --all: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if r := tidectl(t, node, cl("volume", "import", "db", "--node", "n1")...); r.code != ExitOK || !strings.Contains(r.stderr, "already managed on n1") {
		t.Errorf("import of a managed volume: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}

	// A spec of the same name on another node is not taken over.
	_, meta, _ := c.st.GetVolumeSpec(t.Context(), "db")
	if err := c.st.DeleteVolumeSpec(t.Context(), "db", meta.ModRevision); err != nil {
		t.Fatal(err)
	}
	if _, err := c.st.CreateVolumeSpec(t.Context(), api.VolumeSpec{Name: "db", Node: "n2", SizeBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if r := tidectl(t, node, cl("volume", "import", "db", "--node", "n1")...); r.code != ExitError || !strings.Contains(r.stderr, "its spec names node n2") {
		t.Errorf("import over another node's spec: exit %d\nstderr %s", r.code, r.stderr)
	}
}

// TestClusterMove: `volume move` refuses, before writing anything, a
// volume on its node's own origin, a node that is not live, fenced or
// drained, and a node that cannot keep the replica; it writes moveTo for
// the node keeping the replica, and places the replica first on another
// node that can keep it; asked again it changes nothing; a second target
// while a move is under way is refused.
func TestClusterMove(t *testing.T) {
	c := newCluster(t)
	cl := c.args
	for _, n := range []api.Node{
		{Name: "n1", ReplicaAddress: "10.0.0.1:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 30}}},
		{Name: "n2", ReplicaAddress: "10.0.0.2:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 30}}},
		{Name: "n3", ReplicaAddress: "10.0.0.3:4420", Pools: []api.PoolInventory{{Name: "ssd", SSDFreeBytes: 1 << 30}}},
		{Name: "n4", ReplicaAddress: "10.0.0.4:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 20}}},
		{Name: "n5", ReplicaAddress: "10.0.0.5:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 30}}},
		{Name: "n6", ReplicaAddress: "10.0.0.6:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 30}}},
		{Name: "n7", ReplicaAddress: "10.0.0.7:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 30}}},
		// san serves lun0 to all but n7 (just registered, say) and itself.
		{Name: "san", ReplicaAddress: "10.0.0.9:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 30}},
			Exports: []api.ExportInventory{{Name: "lun0", Hosts: []string{"n1", "n2", "n3", "n4", "n5", "n6"}}}},
	} {
		c.register(t, n)
	}
	if _, err := c.st.PutFence(t.Context(), api.Fence{Node: "n5", Volumes: []string{"other"}, CreatedAt: time.Now().UTC()}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.st.PutNodeSpec(t.Context(), api.NodeSpec{Name: "n6", Drain: true}, 0); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []api.VolumeSpec{
		{Name: "db", Node: "n1", Pool: "fast", WriteCacheBytes: 64 << 20, Protect: "peer", ReplicaNode: "n2", ReplicaPool: "fast",
			SharedOrigin: &api.SharedOrigin{Node: "san", Export: "lun0"}},
		{Name: "logs", Node: "n1", Pool: "fast", SizeBytes: 1 << 30, WriteCacheBytes: 64 << 20},
	} {
		if _, err := c.st.CreateVolumeSpec(t.Context(), spec); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name              string
		args              []string
		code              int
		want              string
		moveTo, replicaOn string
	}{
		{"no --to", cl("volume", "move", "db"), ExitUsage, "volume move needs --to NODE", "", "n2"},
		{"own origin", cl("volume", "move", "logs", "--to", "n2"), ExitError, "volume logs caches an origin of node n1's own", "", "n2"},
		{"node not live", cl("volume", "move", "db", "--to", "n9"), ExitError, "node n9 is not registered", "", "n2"},
		{"fenced node", cl("volume", "move", "db", "--to", "n5"), ExitError, "node n5 is fenced", "", "n2"},
		{"drained node", cl("volume", "move", "db", "--to", "n6"), ExitError, "node n6 is drained", "", "n2"},
		{"no room for the replica", cl("volume", "move", "db", "--to", "n4"), ExitError, "node n4 cannot keep the replica of volume db", "", "n2"},
		{"a node the origin is not served to", cl("volume", "move", "db", "--to", "n7"), ExitError,
			"node n7 does not see export lun0 of node san, which volume db caches (it is served to: n1, n2, n3, n4, n5, n6)", "", "n2"},
		{"the exporter itself", cl("volume", "move", "db", "--to", "san"), ExitError, "node san does not see export lun0 of node san", "", "n2"},
		{"to the replica's node", cl("volume", "move", "db", "--to", "n2"), ExitOK, "move to node n2 written", "n2", "n2"},
		{"the same again", cl("volume", "move", "db", "--to", "n2"), ExitOK, "volume db: move to node n2 written; add --wait", "n2", "n2"},
		{"another target meanwhile", cl("volume", "move", "db", "--to", "n3"), ExitError, "volume db is moving to node n2 already", "n2", "n2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tidectl(t, nil, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
				t.Fatalf("exit %d, want %d with %q\nstdout %s\nstderr %s", r.code, tc.code, tc.want, r.stdout, r.stderr)
			}
			spec, _, err := c.st.GetVolumeSpec(t.Context(), "db")
			if err != nil || spec.MoveTo != tc.moveTo || spec.ReplicaNode != tc.replicaOn || spec.Node != "n1" {
				t.Fatalf("spec after the command: node %s, moveTo %q, replica on %q (%v); want n1, %q, %q",
					spec.Node, spec.MoveTo, spec.ReplicaNode, err, tc.moveTo, tc.replicaOn)
			}
		})
	}

	// To a node without the replica: the replica is placed there first,
	// in the same write.
	spec, meta, err := c.st.GetVolumeSpec(t.Context(), "db")
	if err != nil {
		t.Fatal(err)
	}
	spec.MoveTo = ""
	if _, err := c.st.UpdateVolumeSpec(t.Context(), spec, meta.ModRevision); err != nil {
		t.Fatal(err)
	}
	r := tidectl(t, nil, cl("volume", "move", "db", "--to", "n3")...)
	if r.code != ExitOK || !strings.Contains(r.stderr, "its replica moves to node n3 first (pool ssd)") {
		t.Fatalf("move to n3: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if spec, _, err = c.st.GetVolumeSpec(t.Context(), "db"); err != nil || spec.MoveTo != "n3" || spec.ReplicaNode != "n3" || spec.ReplicaPool != "ssd" {
		t.Fatalf("spec after a move to n3: moveTo %q, replica %s/%s (%v); want n3, n3/ssd", spec.MoveTo, spec.ReplicaNode, spec.ReplicaPool, err)
	}
}

// TestClusterMoveHandoverTime: volume move --wait times the handover from
// the owner's stop that went through, not from an attempt that found the
// device still open (I/O went on then): the owner, playing its part
// here, writes "moving", then "moving" with the wait's error for a
// few seconds, then stops for good and hands over.
func TestClusterMoveHandoverTime(t *testing.T) {
	c := newCluster(t)
	for _, n := range []api.Node{
		{Name: "n1", ReplicaAddress: "10.0.0.1:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 30}}},
		{Name: "n2", ReplicaAddress: "10.0.0.2:4420", Pools: []api.PoolInventory{{Name: "fast", SSDFreeBytes: 1 << 30}}},
		{Name: "san", Exports: []api.ExportInventory{{Name: "lun0", Hosts: []string{"n1", "n2"}}}},
	} {
		c.register(t, n)
	}
	spec := api.VolumeSpec{Name: "db", Node: "n1", Pool: "fast", WriteCacheBytes: 64 << 20, Protect: "peer", ReplicaNode: "n2", ReplicaPool: "fast",
		SharedOrigin: &api.SharedOrigin{Node: "san", Export: "lun0"}}
	if _, err := c.st.CreateVolumeSpec(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	status := func(node, state, why string) {
		if err := c.st.PutVolumeStatus(context.Background(), api.VolumeStatus{Name: "db", Node: node, State: state, Error: why,
			PeerNode: "n2", MirrorHealth: "AA", UpdatedAt: time.Now().UTC()}); err != nil {
			t.Error(err)
		}
	}
	status("n1", api.StateActive, "")
	go func() {
		for {
			time.Sleep(50 * time.Millisecond)
			if s, _, err := c.st.GetVolumeSpec(context.Background(), "db"); err == nil && s.MoveTo == "n2" {
				break
			}
		}
		status("n1", api.StateMoving, "")
		time.Sleep(400 * time.Millisecond)
		status("n1", api.StateMoving, "move to node n2 waits: the device is open 1 time(s)")
		time.Sleep(3 * time.Second)
		status("n1", api.StateMoving, "")
		s, meta, err := c.st.GetVolumeSpec(context.Background(), "db")
		if err != nil {
			t.Error(err)
			return
		}
		s.Node, s.MovedFrom, s.MoveTo, s.ReplicaNode, s.ReplicaPool = "n2", "n1", "", "", ""
		if _, err := c.st.FailOverVolumeSpec(context.Background(), s, meta.ModRevision); err != nil {
			t.Error(err)
			return
		}
		time.Sleep(300 * time.Millisecond)
		status("n2", api.StateActive, "")
	}()
	r := tidectl(t, nil, c.args("volume", "move", "db", "--to", "n2", "--wait", "--timeout", "30s")...)
	m := regexp.MustCompile(`handed over in ([0-9.]+) s`).FindStringSubmatch(r.stdout)
	if r.code != ExitOK || m == nil {
		t.Fatalf("volume move --wait: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	// From the last stop (then 0.3 s to n2 running it, plus polling),
	// not from the first (3.4 s before that).
	if secs, _ := strconv.ParseFloat(m[1], 64); secs >= 2.5 {
		t.Fatalf("handover reported as %s s, counted from the stop that found the device open:\n%s", m[1], r.stdout)
	}
}

// TestNodeListServed: node list says what each node serves the others,
// the cluster's pool as a whole: the totals, each replica slice a node
// keeps of another's write cache, each device it exports with the nodes
// it reaches and the volume that caches it.
func TestNodeListServed(t *testing.T) {
	c := newCluster(t)
	for _, n := range []api.Node{
		{Name: "node-a", Pools: []api.PoolInventory{{Name: "fast", OriginFreeBytes: 100 << 30, SSDFreeBytes: 10 << 30}}},
		{Name: "node-b", Pools: []api.PoolInventory{{Name: "fast", OriginFreeBytes: 50 << 30, SSDFreeBytes: 6 << 30}},
			Replicas: []api.ReplicaInventory{{Volume: "db", Owner: "node-a", Pool: "fast", SizeBytes: 64 << 20, Exported: true}}},
		{Name: "san", Exports: []api.ExportInventory{
			{Name: "lun0", UUID: "4e0b5c7e-0000-5000-8000-000000000001", SizeBytes: 4 << 30, Hosts: []string{"node-a", "node-b"}},
			{Name: "lun1", UUID: "4e0b5c7e-0000-5000-8000-000000000002", SizeBytes: 2 << 30, Error: "open /dev/md/lun1: no such file or directory"},
		}},
	} {
		c.register(t, n)
	}
	if _, err := c.st.CreateVolumeSpec(t.Context(), api.VolumeSpec{Name: "db", Node: "node-a", WriteCacheBytes: 64 << 20, Protect: "peer",
		ReplicaNode: "node-b", SharedOrigin: &api.SharedOrigin{Node: "san", Export: "lun0"}}); err != nil {
		t.Fatal(err)
	}
	r := tidectl(t, nil, append(c.flags, "node", "list")...)
	if r.code != ExitOK {
		t.Fatalf("node list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"cluster: 3 nodes, 150 GiB free on their HDD arrays, 16 GiB free on their SSDs",
		"replica: node-b keeps the write-cache replica of volume db of node node-a (64 MiB, pool fast), exported",
		"export: san exports lun0 (4 GiB) to node-a, node-b; cached by volume db",
		"export: san exports lun1 (2 GiB) not exported: open /dev/md/lun1: no such file or directory; no volume caches it",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("node list lacks %q:\n%s", want, r.stdout)
		}
	}
}
