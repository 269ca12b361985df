// SPDX-License-Identifier: Apache-2.0

package daemoncli

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/cli"
	"github.com/tidecache/tidecache/pkg/store"
)

func TestPlaintextEndpoints(t *testing.T) {
	tests := []struct {
		name      string
		endpoints []string
		tls       bool
		want      []string
	}{
		{"http remote", []string{"http://10.0.0.1:2379", "http://etcd1:2379"}, false, []string{"http://10.0.0.1:2379", "http://etcd1:2379"}},
		{"http loopback", []string{"http://127.0.0.1:2379", "http://localhost:2379", "http://[::1]:2379"}, false, nil},
		{"https", []string{"https://10.0.0.1:2379"}, true, nil},
		{"host:port without TLS", []string{"10.0.0.1:2379", "127.0.0.1:2379"}, false, []string{"10.0.0.1:2379"}},
		{"host:port with TLS", []string{"10.0.0.1:2379"}, true, nil},
		{"unix socket", []string{"unix:///run/etcd.sock"}, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := store.Config{Endpoints: tt.endpoints}
			if tt.tls {
				sc.CertFile, sc.KeyFile, sc.CAFile = "c", "k", "ca"
			}
			if got := plaintextEndpoints(sc); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// run runs tidecached with args and returns its stderr and error.
func run(t *testing.T, args ...string) (stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := NewTidecached(&out, &errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return errOut.String(), err
}

// `tidecached run` warns about a plaintext external endpoint before
// anything else happens; the invalid node name stops it right after,
// before it touches device-mapper or etcd.
func TestRunWarnsPlaintextEndpoint(t *testing.T) {
	stderr, err := run(t, "run", "--node", "Not_A_Node", "--etcd-endpoints", "http://10.0.0.1:2379,http://127.0.0.1:2379")
	if err == nil || !strings.Contains(err.Error(), "invalid node name") {
		t.Fatalf("err = %v, want the node name refused", err)
	}
	if !strings.Contains(stderr, "level=WARN") || !strings.Contains(stderr, "etcd endpoint without TLS") ||
		!strings.Contains(stderr, "endpoint=http://10.0.0.1:2379") {
		t.Errorf("no warning for the plaintext endpoint:\n%s", stderr)
	}
	if strings.Contains(stderr, "endpoint=http://127.0.0.1:2379") {
		t.Errorf("warned about a loopback endpoint:\n%s", stderr)
	}

	stderr, _ = run(t, "run", "--node", "Not_A_Node", "--etcd-endpoints", "http://127.0.0.1:2379")
	if strings.Contains(stderr, "without TLS") {
		t.Errorf("warned about a loopback endpoint:\n%s", stderr)
	}
}

// The embedded etcd's TLS flags are refused where they cannot be honoured.
func TestRunEmbeddedTLSFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		want  string
		usage bool
	}{
		{"without --embedded-etcd", []string{"--embedded-etcd-cert", "c", "--embedded-etcd-key", "k"}, "give --embedded-etcd", false},
		{"client CA without --embedded-etcd", []string{"--embedded-etcd-client-ca", "ca"}, "give --embedded-etcd", false},
		{"cert without key", []string{"--embedded-etcd", "--embedded-etcd-cert", "c"}, "embedded-etcd-key", true},
		{"no client certificate for the daemon", []string{"--embedded-etcd", "--embedded-etcd-cert", "c", "--embedded-etcd-key", "k"}, "--etcd-cert", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := run(t, append([]string{"run", "--node", "n1"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %q", err, tt.want)
			}
			if got := cli.ExitCode(err) == cli.ExitUsage; got != tt.usage {
				t.Errorf("usage error = %v, want %v (%v)", got, tt.usage, err)
			}
		})
	}
}

// The embedded etcd's cluster flags are refused where they cannot be
// honoured, before device-mapper or etcd is touched.
func TestRunEmbeddedClusterFlags(t *testing.T) {
	const ic = "n1=http://10.0.0.1:2390,n2=http://10.0.0.2:2390,n3=http://10.0.0.3:2390"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"cluster without --embedded-etcd", []string{"--embedded-etcd-initial-cluster", ic},
			"--embedded-etcd-initial-cluster configure the embedded etcd: give --embedded-etcd"},
		{"name and state without --embedded-etcd", []string{"--embedded-etcd-name", "n1", "--embedded-etcd-initial-cluster-state", "new"},
			"--embedded-etcd-name, --embedded-etcd-initial-cluster-state configure"},
		{"peer TLS without --embedded-etcd", []string{"--embedded-etcd-peer-ca", "ca"}, "give --embedded-etcd"},
		{"external endpoints too", []string{"--embedded-etcd", "--embedded-etcd-initial-cluster", ic, "--etcd-endpoints", "http://10.0.0.9:2379"},
			"drop --etcd-endpoints"},
		{"node not in the cluster", []string{"--embedded-etcd", "--embedded-etcd-initial-cluster", strings.ReplaceAll(ic, "n1=", "n9=")},
			`Name "n1" is not in InitialCluster (n9, n2, n3)`},
		{"name not in the cluster", []string{"--embedded-etcd", "--embedded-etcd-initial-cluster", ic, "--embedded-etcd-name", "n4"},
			`Name "n4" is not in InitialCluster`},
		{"peer URL differs", []string{"--embedded-etcd", "--embedded-etcd-initial-cluster", ic, "--embedded-etcd-peer-url", "http://10.0.0.5:2390"},
			"differs from"},
		{"state without a cluster", []string{"--embedded-etcd", "--embedded-etcd-initial-cluster-state", "existing"},
			"set InitialCluster too"},
		{"client URL on all interfaces", []string{"--embedded-etcd", "--embedded-etcd-initial-cluster", ic, "--etcd-client-url", "http://0.0.0.0:2389"},
			"ClientURL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := run(t, append([]string{"run", "--node", "n1", "--etcd-data-dir", t.TempDir()}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// --export is parsed and checked before the daemon touches device-mapper
// or etcd.
func TestRunExportFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--export", "san"}, `--export "san": want NAME=DEVICE`},
		{[]string{"--export", "San=/dev/md/san"}, "invalid export name"},
		{[]string{"--export", "san=md/san"}, "absolute path"},
		{[]string{"--export", "san=/dev/md/san"}, "needs --replica-address"},
		{[]string{"--export", "san=/dev/md/san", "--export", "san=/dev/sdb", "--replica-address", "10.0.0.3", "--insecure-nvme"}, "san given twice"},
		{[]string{"--replica-address", "10.0.0.3"}, "give --insecure-nvme"},
	} {
		_, err := run(t, append([]string{"run", "--node", "n1", "--embedded-etcd"}, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run %v: %v, want an error naming %q", tt.args, err, tt.want)
		}
	}
}
