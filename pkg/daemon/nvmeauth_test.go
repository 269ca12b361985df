// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/store"
)

// TestNVMeAuthSecrets runs the secrets of NVMe in-band authentication
// between three nodes' keys on one real etcd: the exporter san makes b's
// secret and publishes it sealed; b opens it, c (another node of the
// cluster, reading the same records) cannot; etcd never holds it in the
// clear; a host that cannot authenticate is refused unless the exporter
// runs with --insecure-nvme; a rotation gives b a new secret, which b
// takes and gives to its live controller to san; a restart keeps it all.
func TestNVMeAuthSecrets(t *testing.T) {
	ctx := context.Background()
	srv, err := etcdserver.Start(ctx, etcdserver.Config{DataDir: filepath.Join(t.TempDir(), "etcd"), Name: "etcd",
		ClientURL: freeURL(t), PeerURL: "http://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	st := openStore(t, srv.Endpoints())

	dirs := map[string]string{}
	keysOf := func(name string, insecure bool) *nvmeKeys {
		if dirs[name] == "" {
			dirs[name] = t.TempDir()
		}
		k, err := newNVMeKeys(name, dirs[name], insecure, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		k.st.Store(st)
		return k
	}
	san, b, c := keysOf("san", false), keysOf("b", false), keysOf("c", false)
	records := []store.Item[api.Node]{
		{Value: api.Node{Name: "san", ReplicaAddress: "10.0.0.1:4420", NVMeAuthKey: san.publicKey()}},
		{Value: api.Node{Name: "b", NVMeAuthKey: b.publicKey()}},
		{Value: api.Node{Name: "c", NVMeAuthKey: c.publicKey()}},
		{Value: api.Node{Name: "old"}}, // a 6.1 kernel: no key
	}
	for _, it := range records {
		reg, err := st.Register(ctx, it.Value, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close(context.Background()) })
	}
	for _, k := range []*nvmeKeys{san, b, c} {
		k.setNodes(records)
	}

	// b asks before san made its secret: told to wait.
	if _, err := b.HostSecret(ctx, "san"); err == nil || !strings.Contains(err.Error(), "has not made") {
		t.Fatalf("b's secret before san exported to b: %v, want a wait", err)
	}
	forB, err := san.ExportKey(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := san.ExportKey(ctx, "b"); again != forB {
		t.Error("a second export made b a new secret")
	}
	if forC, _ := san.ExportKey(ctx, "c"); forC == forB {
		t.Error("b and c share a secret")
	}
	got, err := b.HostSecret(ctx, "san")
	if err != nil || got != forB {
		t.Fatalf("b's secret from san: %q, %v; want the one san requires", got, err)
	}
	// c reads b's record, as any node of the cluster can, and cannot open it.
	rec, _, err := st.GetNVMeSecret(ctx, "san", "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ring.KeyPair().Open(rec.Sealed); err == nil {
		t.Error("c opened the secret san made for b")
	}
	secrets, _, _, err := st.ListNVMeSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if strings.Contains(s.Value.Sealed, strings.Split(forB, ":")[2][:12]) {
			t.Errorf("etcd's record %s holds b's secret in the clear", s.Meta.Key)
		}
	}
	// An exporter that publishes no key (a 6.1 kernel) requires no secret.
	if got, err := san.HostSecret(ctx, "old"); err != nil || got != "" {
		t.Errorf("secret for an exporter without authentication: %q, %v; want none", got, err)
	}

	// A host that cannot authenticate: refused, or served by NQN with
	// --insecure-nvme.
	if _, err := san.ExportKey(ctx, "old"); !errors.Is(err, ErrHostCannotAuthenticate) {
		t.Errorf("export to a node without a key: %v, want ErrHostCannotAuthenticate", err)
	}
	if key, err := keysOf("san", true).ExportKey(ctx, "old"); err != nil || key != "" {
		t.Errorf("export to a node without a key with --insecure-nvme: %q, %v; want no key", key, err)
	}

	// b's live controller to san, connected with the secret.
	sys := t.TempDir()
	ctrl := filepath.Join(sys, "class", "nvme", "nvme3")
	if err := os.MkdirAll(ctrl, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"hostnqn": nvmeof.HostNQN("b"), "transport": "tcp", "address": "traddr=10.0.0.1,trsvcid=4420", "dhchap_secret": forB} {
		if err := os.WriteFile(filepath.Join(ctrl, f), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b.initiator = nvmeof.Initiator{SysRoot: sys}

	// A rotation asked of san.
	if _, err := st.PutNodeSpec(ctx, api.NodeSpec{Name: "san", RotateNVMeSecrets: time.Now().UnixNano()}, 0); err != nil {
		t.Fatal(err)
	}
	san.rotateIfAsked(ctx)
	if _, _, err := st.GetNVMeSecret(ctx, "san", "c"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("c's record of the old rotation, not served since: %v, want it deleted", err)
	}
	rotated, err := san.ExportKey(ctx, "b")
	if err != nil || rotated == forB {
		t.Fatalf("b's secret after the rotation: same %v, %v; want a new one", rotated == forB, err)
	}
	san.rotateIfAsked(ctx) // done once: the same request does not rotate again
	if again, _ := san.ExportKey(ctx, "b"); again != rotated {
		t.Error("the same rotation request rotated twice")
	}
	b.takeSecrets(ctx)
	if got, _ := os.ReadFile(filepath.Join(ctrl, "dhchap_secret")); strings.TrimSpace(string(got)) != rotated {
		t.Errorf("b's live controller has %q after the rotation, want the new secret", got)
	}
	if r, ok := b.ring.Received("san"); !ok || r.Secret != rotated {
		t.Errorf("b keeps %+v from san, want the new secret", r)
	}

	// san's keyring lost: it makes b a new secret in a new record, which
	// b takes and gives its controller, in the same generation or not.
	if err := os.RemoveAll(dirs["san"]); err != nil {
		t.Fatal(err)
	}
	fresh := keysOf("san", false)
	fresh.setNodes(records)
	fresh.rotateIfAsked(ctx)
	remade, err := fresh.ExportKey(ctx, "b")
	if err != nil || remade == rotated {
		t.Fatalf("b's secret from san's new keyring: same %v, %v", remade == rotated, err)
	}
	b.takeSecrets(ctx)
	if got, _ := os.ReadFile(filepath.Join(ctrl, "dhchap_secret")); strings.TrimSpace(string(got)) != remade {
		t.Errorf("b's live controller has %q after san's keyring was made anew, want its new secret", got)
	}
	rotated = remade

	// Restarted without etcd, each side still has what it needs.
	san2, b2 := keysOf("san", false), keysOf("b", false)
	san2.st.Store(nil)
	b2.st.Store(nil)
	if key, err := san2.ExportKey(ctx, "b"); err != nil || key != rotated {
		t.Errorf("san restarted without etcd requires %q, %v; want b's current secret", key, err)
	}
	if s, err := b2.HostSecret(ctx, "san"); err != nil || s != rotated {
		t.Errorf("b restarted without etcd presents %q, %v; want its current secret", s, err)
	}
}
