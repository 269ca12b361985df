// SPDX-License-Identifier: Apache-2.0

package etcdtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tidecache/tidecache/pkg/etcdserver"
)

// RunWithMember is the body of a TestMain whose tests share one real
// single-member etcd: it starts the member in a temporary directory on
// free loopback ports, hands its client endpoints to set, runs the tests
// and tears the member down. Tests keep apart by key prefix. It returns
// the exit code for os.Exit.
func RunWithMember(m *testing.M, set func(endpoints []string)) int {
	dir, err := os.MkdirTemp("", "etcd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := etcdserver.Start(context.Background(), etcdserver.Config{
		DataDir: filepath.Join(dir, "etcd"), ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start etcd:", err)
		return 1
	}
	defer srv.Close()
	set(srv.Endpoints())
	return m.Run()
}
