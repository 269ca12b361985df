// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
)

// TestClosest: names within two edits of what was typed (and half its
// length), or starting with it, ignoring case; nearest first, then by
// name, three at most.
func TestClosest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		typed string
		names []string
		want  []string
	}{
		{"one close name", "msql", []string{"web", "mysql"}, []string{"mysql"}},
		{"swapped letters are one edit", "msyql", []string{"mysql", "mssql-old"}, []string{"mysql"}},
		{"two close names", "db", []string{"web", "db2", "db1"}, []string{"db1", "db2"}},
		{"nearest first, three at most", "mysql", []string{"mysql-10", "mysql3", "mysql2", "mysql1"}, []string{"mysql1", "mysql2", "mysql3"}},
		{"two edits", "mysql", []string{"mysql12", "nosql", "mariadb"}, []string{"mysql12", "nosql"}},
		{"a short name: one edit", "db", []string{"web", "dv", "ab1"}, []string{"dv"}},
		{"one letter: its prefixes only", "w", []string{"a", "web"}, []string{"web"}},
		{"a prefix however far", "my", []string{"mysql-replica", "web"}, []string{"mysql-replica"}},
		{"none close", "zzzz", []string{"mysql", "web"}, nil},
		{"case difference", "MySQL", []string{"mysql", "postgres"}, []string{"mysql"}},
		{"the name exists: nothing", "web", []string{"web", "wbe"}, nil},
		{"each name once", "fsat", []string{"fast", "fast"}, []string{"fast"}},
		{"no names", "db", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := closest(tc.typed, tc.names); !slices.Equal(got, tc.want) {
				t.Errorf("closest(%q, %q) = %q, want %q", tc.typed, tc.names, got, tc.want)
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"mysql", "mysql", 0}, {"msql", "mysql", 1},
		{"msyql", "mysql", 1}, {"volum", "volume", 1}, {"crate", "create", 1}, {"ca", "abc", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestDidYouMeanKeepsTheError: the suggestion is added to the error, which
// errors.Is and the exit status still see.
func TestDidYouMeanKeepsTheError(t *testing.T) {
	err := didYouMean(volumeNotFound("msql"), "msql", []string{"mysql"})
	if !errors.Is(err, pool.ErrVolumeNotFound) || ExitCode(err) != ExitError {
		t.Errorf("%v: errors.Is %v, exit %d", err, errors.Is(err, pool.ErrVolumeNotFound), ExitCode(err))
	}
	if err := didYouMean(usageErrorf("node sna: no such node"), "sna", []string{"san"}); ExitCode(err) != ExitUsage {
		t.Errorf("%v: exit %d, want %d", err, ExitCode(err), ExitUsage)
	}
	plain := errors.New("volume msql: volume not found")
	if err := didYouMean(plain, "msql", []string{"web"}); err != plain {
		t.Errorf("no name close: got %v, want the error itself", err)
	}
}

// TestNameSuggestions runs tidectl with names that do not exist, in local
// and cluster mode, and checks the whole error it prints and its exit
// status.
func TestNameSuggestions(t *testing.T) {
	c := newCluster(t)
	cl := c.args
	c.liveNode(t, "san", "fast")
	c.liveNode(t, "db1", "fast", "slow")
	if _, err := c.st.PutNodeSpec(t.Context(), api.NodeSpec{Name: "backup", Drain: true}, 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mysql", "mysql2", "web"} {
		if _, err := c.st.CreateVolumeSpec(t.Context(), api.VolumeSpec{Name: name, SizeBytes: 1 << 30, Mode: "writethrough"}); err != nil {
			t.Fatal(err)
		}
	}
	vol := func(name string) engine.VolumeInfo {
		v := dbVolume()
		v.Name = name
		return v
	}
	node := &fakeNode{vols: []engine.VolumeInfo{vol("mysql"), vol("db1"), vol("db2"), vol("web")}}

	for _, tc := range []struct {
		name string
		node *fakeNode
		args []string
		code int
		want string
	}{
		{"one close name", node, []string{"volume", "show", "msql"}, ExitError, `volume msql: volume not found; did you mean "mysql"?`},
		{"two close names", node, []string{"volume", "show", "db"}, ExitError, `volume db: volume not found; did you mean "db1" or "db2"?`},
		{"none close", node, []string{"volume", "show", "zzzz"}, ExitError, `volume zzzz: volume not found`},
		{"case difference", node, []string{"volume", "show", "MySQL"}, ExitError, `volume MySQL: volume not found; did you mean "mysql"?`},
		{"tune", node, []string{"volume", "tune", "wbe", "--reset"}, ExitError, `volume wbe: volume not found; did you mean "web"?`},
		{"cluster: two close names", nil, cl("volume", "show", "msql"), ExitError, `volume msql: volume not found; did you mean "mysql" or "mysql2"?`},
		{"cluster: set-mode", nil, cl("volume", "set-mode", "wbe", "passthrough"), ExitError, `volume wbe: volume not found; did you mean "web"?`},
		{"cluster: none close", nil, cl("volume", "resize", "zzzz", "--size", "2G"), ExitError, `volume zzzz: volume not found`},
		{"--node", nil, cl("volume", "create", "x", "--size", "1G", "--write-cache", "64M", "--node", "sna"), ExitUsage,
			`--node sna: no such live node (live nodes: db1, san); did you mean "san"?`},
		{"--pool", nil, cl("volume", "create", "x", "--size", "1G", "--write-cache", "64M", "--pool", "fsat"), ExitUsage,
			"--pool fsat: no live node has a pool of that name (see `tidectl node list`); did you mean \"fast\"?"},
		{"--pool of a node", nil, cl("volume", "create", "x", "--size", "1G", "--write-cache", "64M", "--node", "san", "--pool", "slwo"), ExitUsage,
			"--pool slwo: node san has no pool of that name (see `tidectl node list`)"},
		{"drain: a node with a spec, not live", nil, cl("node", "drain", "backpu"), ExitUsage,
			"node backpu: no such node (see `tidectl node list`); did you mean \"backup\"?"},
		{"undrain: a live node", nil, cl("node", "undrain", "sab"), ExitUsage,
			"node sab: no such node (see `tidectl node list`); did you mean \"san\"?"},
		{"rotate: live nodes only", nil, cl("node", "rotate-nvme-secrets", "db2"), ExitUsage,
			"node db2: not registered (see `tidectl node list`): a node rotates its secrets itself, so it must be up; did you mean \"db1\"?"},
		{"rotate: not a node that is down", nil, cl("node", "rotate-nvme-secrets", "backpu"), ExitUsage,
			"node backpu: not registered (see `tidectl node list`): a node rotates its secrets itself, so it must be up"},
		{"import", node, cl("volume", "import", "myslq", "--node", "san"), ExitError, `volume myslq: volume not found; did you mean "mysql"?`},
		{"a command", nil, []string{"volum"}, ExitUsage, `unknown command "volum" for "tidectl"; did you mean "volume"?`},
		{"a subcommand", nil, []string{"volume", "crate", "db"}, ExitUsage, `unknown command "crate" for "tidectl volume"; did you mean "create"?`},
		{"no command close", nil, []string{"node", "frobnicate"}, ExitUsage, `unknown command "frobnicate" for "tidectl node"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tidectl(t, tc.node, tc.args...)
			if r.code != tc.code || r.stderr != "error: "+tc.want+"\n" {
				t.Fatalf("tidectl %s: exit %d, want %d\nstderr %q\nwant   %q", strings.Join(tc.args, " "), r.code, tc.code, r.stderr, "error: "+tc.want+"\n")
			}
		})
	}
}

// TestLocalPoolSuggestions: the pool and --accept-data-loss names of the
// pool commands, which need a real engine to run, get their suggestions
// from this node's pools.
func TestLocalPoolSuggestions(t *testing.T) {
	ctx := t.Context()
	node := &fakeNode{pools: []engine.PoolInfo{{Name: "fast", Volumes: []string{"mysql", "web"}}, {Name: "slow"}}}
	notFound := fmt.Errorf("pool fsat: %w", engine.ErrPoolNotFound)
	if got, want := fmt.Sprint(unknownPool(ctx, node, "fsat", notFound)), `pool fsat: pool not found; did you mean "fast"?`; got != want {
		t.Errorf("unknown pool: %q, want %q", got, want)
	}
	if err := unknownPool(ctx, node, "fast", errors.New("fake")); err.Error() != "fake" {
		t.Errorf("another error: %v", err)
	}
	accept := fmt.Errorf("pool fast: %w", pool.ErrVolumeNotFound)
	got := unknownAcceptedVolume(ctx, fakePools{node}, "fast", []string{"web", "msql"}, accept)
	if want := `pool fast: volume not found; did you mean "mysql"?`; got.Error() != want || !errors.Is(got, pool.ErrVolumeNotFound) {
		t.Errorf("unknown --accept-data-loss: %q, want %q", got, want)
	}
}

// fakePools reads one pool of a fakeNode, as the engine's Pool does.
type fakePools struct{ f *fakeNode }

func (p fakePools) Pool(_ context.Context, name string) (engine.PoolInfo, error) {
	for _, info := range p.f.pools {
		if info.Name == name {
			return info, nil
		}
	}
	return engine.PoolInfo{}, fmt.Errorf("pool %s: %w", name, engine.ErrPoolNotFound)
}
