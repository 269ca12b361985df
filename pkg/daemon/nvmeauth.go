// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/nvmeauth"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/store"
)

// NVMe in-band authentication (DH-HMAC-CHAP) on kernels that have it
// (Debian's 6.12; 6.1 is built without it): every export requires of its
// host a secret the exporter made for that host alone (pkg/nvmeauth), so a
// machine that declares an allowed node's host NQN is refused unless it
// holds that node's secret. The exporter keeps its secrets in its keyring
// (--state-dir, root only) and publishes each one in etcd sealed to its
// host's public key, which the host's node record carries; the host opens
// it when it attaches and keeps it in its own keyring. The source-address
// allow-list (nvmeallow.go) stays in force on every kernel.
//
// Rotation (tidectl node rotate-nvme-secrets) forgets the exporter's
// secrets; the next target round makes new ones, publishes them and sets
// them on the target's host entries. Each host, in its own round, opens
// its new secret and gives it to its live controllers, which
// authenticate again with it: the kernel keeps the secret a controller
// was connected with for its reconnects.

// ErrHostCannotAuthenticate refuses to serve a host that publishes no
// sealing key, on a node that requires authentication.
var ErrHostCannotAuthenticate = errors.New("the node cannot authenticate over NVMe/TCP (its kernel lacks in-band authentication, " +
	"or its daemon is older): give this node --insecure-nvme to serve it by its source address alone (docs/security.md)")

// kernelHasNVMeAuth reports whether the running kernel has NVMe in-band
// authentication: Debian builds it as the module nvme-auth, which the
// NVMe host and target both use (CONFIG_NVME_HOST_AUTH and
// CONFIG_NVME_TARGET_AUTH come with it); modprobe loads it or finds it
// built in.
func kernelHasNVMeAuth(ctx context.Context) bool {
	return exec.CommandContext(ctx, "modprobe", "-q", "nvme-auth").Run() == nil
}

// nvmeKeys gives the engine and the export round the secrets of NVMe
// authentication (engine.NVMeAuth), from this node's keyring and etcd.
type nvmeKeys struct {
	node string
	ring *nvmeauth.Keyring
	// insecure serves hosts that cannot authenticate (--insecure-nvme).
	insecure bool
	log      *slog.Logger
	// st is the store, once open; nil before.
	st atomic.Pointer[store.Store]
	// initiator gives live controllers a rotated secret.
	initiator nvmeof.Initiator

	mu sync.Mutex
	// nodes are the node records the target round last read, by name.
	nodes map[string]api.Node
	// published is what this daemon has written of each host's secret
	// record: written once per start, then again only when the
	// generation or the host's key changes.
	published map[string]api.NVMeSecret
	// warned are the problems already logged, by host or exporter.
	warned map[string]string
}

// newNVMeKeys opens the keyring under stateDir.
func newNVMeKeys(node, stateDir string, insecure bool, log *slog.Logger) (*nvmeKeys, error) {
	ring, err := nvmeauth.OpenKeyring(filepath.Join(stateDir, nvmeauth.DirName))
	if err != nil {
		return nil, err
	}
	return &nvmeKeys{node: node, ring: ring, insecure: insecure, log: log, initiator: nvmeof.NewInitiator(),
		published: map[string]api.NVMeSecret{}, warned: map[string]string{}}, nil
}

// publicKey is what this node's record publishes (api.Node.NVMeAuthKey).
func (k *nvmeKeys) publicKey() string { return k.ring.KeyPair().PublicString() }

// setNodes records the node records the target round read.
func (k *nvmeKeys) setNodes(items []store.Item[api.Node]) {
	nodes := make(map[string]api.Node, len(items))
	for _, it := range items {
		nodes[it.Value.Name] = it.Value
	}
	k.mu.Lock()
	k.nodes = nodes
	k.mu.Unlock()
}

// ExportKey returns the secret this node's target requires of host,
// making and publishing it the first time. A host whose record is
// missing for a moment keeps the secret it has; one that publishes no key
// is served without a secret only with --insecure-nvme.
func (k *nvmeKeys) ExportKey(ctx context.Context, host string) (string, error) {
	k.mu.Lock()
	n, known := k.nodes[host]
	k.mu.Unlock()
	if !known {
		if st := k.st.Load(); st != nil {
			if rec, _, err := st.GetNode(ctx, host); err == nil {
				n, known = rec, true
			}
		}
	}
	if !known {
		if s, ok := k.ring.Existing(host); ok {
			return s, nil
		}
		return "", fmt.Errorf("NVMe secret for node %s: its record cannot be read, so whether it authenticates is not known yet", host)
	}
	if n.NVMeAuthKey == "" {
		if k.insecure {
			return "", nil
		}
		return "", fmt.Errorf("serve node %s: %w", host, ErrHostCannotAuthenticate)
	}
	secret, gen, err := k.ring.HostSecret(host)
	if err != nil {
		return "", err
	}
	if err := k.publish(ctx, host, n.NVMeAuthKey, secret, gen); err != nil {
		// The host cannot connect until it can read the secret; the
		// export itself may go ahead.
		k.warnOnce(host, "NVMe secret not published yet; the host cannot connect until it is", err)
	}
	return secret, nil
}

// publish writes host's secret, sealed to its key, unless this daemon
// already wrote that generation for that key.
func (k *nvmeKeys) publish(ctx context.Context, host, hostKey, secret string, gen int64) error {
	k.mu.Lock()
	done := k.published[host]
	k.mu.Unlock()
	if done.Generation == gen && done.HostKey == hostKey && done.Sealed != "" {
		return nil
	}
	st := k.st.Load()
	if st == nil {
		return errors.New("etcd not open yet")
	}
	sealed, err := nvmeauth.Seal(secret, hostKey)
	if err != nil {
		return err
	}
	rec := api.NVMeSecret{Exporter: k.node, Host: host, Generation: gen, Sealed: sealed, HostKey: hostKey}
	var rev int64
	if _, meta, err := st.GetNVMeSecret(ctx, k.node, host); err == nil {
		rev = meta.ModRevision
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if _, err := st.PutNVMeSecret(ctx, rec, rev); err != nil {
		return err
	}
	k.mu.Lock()
	k.published[host] = rec
	k.mu.Unlock()
	k.log.Info("NVMe secret published for a host", "host", host, "generation", gen)
	return nil
}

// HostSecret returns the secret to present to exporter's target: none if
// the exporter does not authenticate, else the one it sealed for this
// node (kept in the keyring, so a restart without etcd still has it).
func (k *nvmeKeys) HostSecret(ctx context.Context, exporter string) (string, error) {
	kept, haveKept := k.ring.Received(exporter)
	st := k.st.Load()
	if st == nil {
		return kept.Secret, nil
	}
	n, _, err := st.GetNode(ctx, exporter)
	if err != nil {
		if haveKept {
			return kept.Secret, nil
		}
		return "", fmt.Errorf("NVMe secret from node %s: %w", exporter, err)
	}
	if n.NVMeAuthKey == "" {
		return "", nil // the exporter requires none
	}
	r, err := k.open(ctx, st, exporter)
	if err != nil {
		return "", err
	}
	return r.Secret, nil
}

// open reads, opens and keeps the secret exporter sealed for this node.
func (k *nvmeKeys) open(ctx context.Context, st *store.Store, exporter string) (nvmeauth.Received, error) {
	rec, _, err := st.GetNVMeSecret(ctx, exporter, k.node)
	if errors.Is(err, store.ErrNotFound) {
		return nvmeauth.Received{}, fmt.Errorf("node %s has not made this node's NVMe secret yet (it does when it exports to this node)", exporter)
	}
	if err != nil {
		return nvmeauth.Received{}, fmt.Errorf("NVMe secret from node %s: %w", exporter, err)
	}
	return k.receive(rec)
}

// receive opens a sealed record and keeps its secret.
func (k *nvmeKeys) receive(rec api.NVMeSecret) (nvmeauth.Received, error) {
	if rec.HostKey != k.publicKey() {
		return nvmeauth.Received{}, fmt.Errorf("node %s sealed this node's NVMe secret to an older key of this node; it seals it again once it reads this node's record", rec.Exporter)
	}
	secret, err := k.ring.KeyPair().Open(rec.Sealed)
	if err != nil {
		return nvmeauth.Received{}, fmt.Errorf("NVMe secret from node %s: %w", rec.Exporter, err)
	}
	r := nvmeauth.Received{Secret: secret, Generation: rec.Generation, Sealed: rec.Sealed}
	if err := k.ring.Receive(rec.Exporter, r); err != nil {
		return nvmeauth.Received{}, err
	}
	return r, nil
}

// rotateIfAsked runs in the target round, before the exports are
// served (so they get the new secrets in the same round): it carries out
// a rotation this node was asked for (api.NodeSpec.RotateNVMeSecrets).
func (k *nvmeKeys) rotateIfAsked(ctx context.Context) {
	st := k.st.Load()
	if st == nil {
		return
	}
	spec, _, err := st.GetNodeSpec(ctx, k.node)
	if err != nil || spec.RotateNVMeSecrets == 0 {
		return
	}
	done, err := k.ring.Rotate(spec.RotateNVMeSecrets)
	if err != nil {
		k.log.Error("NVMe secret rotation failed", "err", err)
		return
	}
	if !done {
		return
	}
	k.log.Warn("NVMe secrets rotated: new secrets go to every host this node exports to", "generation", spec.RotateNVMeSecrets)
	k.mu.Lock()
	k.published = map[string]api.NVMeSecret{}
	k.mu.Unlock()
	k.dropOld(ctx, st, spec.RotateNVMeSecrets)
}

// takeSecrets opens the secrets exporters made anew for this node (a
// rotation, a keyring made again) and gives each to the live controllers
// connected to its exporter: the kernel keeps the secret a controller
// connected with for its reconnects, which the exporter no longer
// accepts.
func (k *nvmeKeys) takeSecrets(ctx context.Context) {
	st := k.st.Load()
	if st == nil {
		return
	}
	recs, _, _, err := st.ListNVMeSecrets(ctx)
	if err != nil {
		return
	}
	var nodes []store.Item[api.Node]
	for _, it := range recs {
		rec := it.Value
		if rec.Host != k.node {
			continue
		}
		if kept, ok := k.ring.Received(rec.Exporter); ok && kept.Generation == rec.Generation && kept.Sealed == rec.Sealed {
			continue
		}
		r, err := k.receive(rec)
		if err != nil {
			k.warnOnce("from "+rec.Exporter, "NVMe secret from an exporter cannot be used", err)
			continue
		}
		if nodes == nil {
			if nodes, _, _, err = st.ListNodes(ctx); err != nil {
				k.log.Warn("NVMe secret taken, but the exporter's address cannot be read: live controllers keep the old one", "exporter", rec.Exporter, "err", err)
				continue
			}
		}
		i := slices.IndexFunc(nodes, func(n store.Item[api.Node]) bool { return n.Value.Name == rec.Exporter })
		if i < 0 {
			continue
		}
		host, _, err := replicaAddress(nodes[i].Value.ReplicaAddress)
		if err != nil {
			continue // it serves nothing: nothing is connected to it
		}
		ctrls, err := k.initiator.Rekey(host, nvmeof.HostNQN(k.node), r.Secret)
		if err != nil {
			k.log.Error("new NVMe secret not given to the live controllers", "exporter", rec.Exporter, "err", err)
			continue
		}
		k.log.Info("NVMe secret from an exporter taken", "exporter", rec.Exporter, "generation", r.Generation, "controllers", ctrls)
	}
}

// watchSecrets runs takeSecrets every replicaInterval, on every node:
// hosts need not serve anything themselves.
func (k *nvmeKeys) watchSecrets(ctx context.Context) {
	for {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		k.takeSecrets(tctx)
		cancel()
		if !sleep(ctx, replicaInterval) {
			return
		}
	}
}

// dropOld deletes this node's secret records older than generation: the
// secrets in them are forgotten, and the hosts still served get new
// records as they are served; a host no longer served keeps none.
func (k *nvmeKeys) dropOld(ctx context.Context, st *store.Store, generation int64) {
	recs, _, _, err := st.ListNVMeSecrets(ctx)
	if err != nil {
		k.log.Warn("old NVMe secret records not deleted", "err", err)
		return
	}
	for _, it := range recs {
		if it.Value.Exporter == k.node && it.Value.Generation < generation {
			if err := st.DeleteNVMeSecret(ctx, k.node, it.Value.Host, it.Meta.ModRevision); err != nil && !errors.Is(err, store.ErrNotFound) {
				k.log.Warn("old NVMe secret record not deleted", "host", it.Value.Host, "err", err)
			}
		}
	}
}

// warnOnce logs a problem once per key until it changes.
func (k *nvmeKeys) warnOnce(key, msg string, err error) {
	k.mu.Lock()
	seen := k.warned[key] == err.Error()
	k.warned[key] = err.Error()
	k.mu.Unlock()
	if !seen {
		k.log.Warn(msg, "peer", key, "err", err)
	}
}
