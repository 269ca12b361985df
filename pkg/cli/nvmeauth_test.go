// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
)

// TestRotateNVMeSecrets: the rotation request lands in the node's spec
// (its drain kept), a later one is newer; nodes that are not up or cannot
// authenticate are refused; --wait returns once the node's secrets are
// all of the new rotation.
func TestRotateNVMeSecrets(t *testing.T) {
	c := newCluster(t)
	cl := c.args
	ctx := t.Context()
	c.liveNode(t, "old")
	reg, err := c.st.Register(ctx, api.Node{Name: "san", NVMeAuthKey: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close(context.Background()) })
	if _, err := c.st.PutNodeSpec(ctx, api.NodeSpec{Name: "san", Drain: true}, 0); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{cl("node", "rotate-nvme-secrets", "nosuch"), "node nosuch: not registered"},
		{cl("node", "rotate-nvme-secrets", "old"), "node old does not authenticate NVMe/TCP"},
		{[]string{"node", "rotate-nvme-secrets", "san"}, "works on the cluster"},
	} {
		if r := tidectl(t, nil, tc.args...); r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("tidectl %s: exit %d, stderr %s; want a usage error with %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}

	r := tidectl(t, nil, cl("node", "rotate-nvme-secrets", "san")...)
	if r.code != ExitOK || !strings.Contains(r.stdout, "rotation") {
		t.Fatalf("rotate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	first, _, err := c.st.GetNodeSpec(ctx, "san")
	if err != nil || first.RotateNVMeSecrets == 0 || !first.Drain {
		t.Fatalf("san's spec after the rotation: %+v, %v; want a request, drain kept", first, err)
	}

	// --wait: done once san's secrets are of the new rotation (written
	// here as san's daemon would).
	done := make(chan result, 1)
	go func() {
		done <- tidectl(t, nil, cl("--wait", "--timeout", "20s", "node", "rotate-nvme-secrets", "san")...)
	}()
	var second api.NodeSpec
	for second.RotateNVMeSecrets <= first.RotateNVMeSecrets {
		time.Sleep(20 * time.Millisecond)
		second, _, _ = c.st.GetNodeSpec(ctx, "san")
	}
	select {
	case r := <-done:
		t.Fatalf("--wait returned before any secret was rotated: exit %d %s%s", r.code, r.stdout, r.stderr)
	case <-time.After(time.Second):
	}
	sealed := "c2VhbGVk"
	if _, err := c.st.PutNVMeSecret(ctx, api.NVMeSecret{Exporter: "san", Host: "b", Generation: second.RotateNVMeSecrets, Sealed: sealed,
		HostKey: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}, 0); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.code != ExitOK || !strings.Contains(r.stdout, "rotated") {
		t.Fatalf("rotate --wait: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
