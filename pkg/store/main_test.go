// SPDX-License-Identifier: Apache-2.0

package store_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/etcdserver/etcdtest"
	"github.com/tidecache/tidecache/pkg/store"
)

// One embedded etcd serves the whole package; every test works under a
// prefix of its own, so tests do not see each other's records.
var endpoints []string

func TestMain(m *testing.M) {
	os.Exit(etcdtest.RunWithMember(m, func(eps []string) { endpoints = eps }))
}

var prefixSeq atomic.Int64

var unsafeKeyChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// testConfig returns a store configuration with a prefix unique to this
// test run.
func testConfig(t *testing.T) store.Config {
	t.Helper()
	cfg := store.DefaultConfig()
	cfg.Endpoints = endpoints
	cfg.Prefix = fmt.Sprintf("/test/%s-%d/v1/", unsafeKeyChars.ReplaceAllString(t.Name(), "_"), prefixSeq.Add(1))
	cfg.RequestTimeout = 3 * time.Second
	return cfg
}

// openStore opens a store under the test's own prefix, closed at the end
// of the test.
func openStore(t *testing.T) *store.Store {
	t.Helper()
	return openWith(t, testConfig(t))
}

func openWith(t *testing.T, cfg store.Config) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
