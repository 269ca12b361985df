// SPDX-License-Identifier: Apache-2.0

package api_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// pure are the packages documented as pure: they may import the standard
// library and other pure tidecache packages, nothing that talks to the
// outside world.
var pure = []string{
	"github.com/tidecache/tidecache/pkg/api",
	"github.com/tidecache/tidecache/pkg/policy",
	"github.com/tidecache/tidecache/pkg/placement",
}

// forbidden are import path prefixes a pure package must not reach, even
// through another package.
var forbidden = []string{
	"go.etcd.io",
	"github.com/prometheus",
	"github.com/spf13/cobra",
	"google.golang.org/grpc",
}

// impureDeps lists the forbidden packages pkg depends on, directly or
// transitively, as go list -deps reports them.
func impureDeps(t *testing.T, pkg string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if errors.Is(err, exec.ErrNotFound) {
		t.Skip("go tool not found in PATH")
	}
	if err != nil {
		t.Fatalf("look up go: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, "list", "-deps", pkg)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.String())
	}
	var bad []string
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				bad = append(bad, dep)
				break
			}
		}
	}
	return bad
}

func TestPurePackagesImportNoExternalSystem(t *testing.T) {
	for _, pkg := range pure {
		t.Run(pkg[strings.LastIndex(pkg, "/")+1:], func(t *testing.T) {
			if bad := impureDeps(t, pkg); len(bad) > 0 {
				t.Errorf("%s is documented as pure but depends on %d forbidden packages, first %s; move the record it needs to pkg/api", pkg, len(bad), bad[0])
			}
		})
	}
}

// The check must be able to fail: the store imports the etcd client and
// grpc, so it has to be caught.
func TestImpureDepsCatchesStore(t *testing.T) {
	bad := impureDeps(t, "github.com/tidecache/tidecache/pkg/store")
	var etcd, grpc bool
	for _, dep := range bad {
		etcd = etcd || strings.HasPrefix(dep, "go.etcd.io/")
		grpc = grpc || strings.HasPrefix(dep, "google.golang.org/grpc")
	}
	if !etcd || !grpc {
		t.Errorf("impureDeps(pkg/store) = %d packages, etcd %v, grpc %v: want both caught", len(bad), etcd, grpc)
	}
}
