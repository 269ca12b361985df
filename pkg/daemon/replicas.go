// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/metrics"
	"github.com/tidecache/tidecache/pkg/pool"
)

// replicaInterval is how often the daemon makes sure every replica it
// keeps is built and exported: after a reboot (assembly builds the
// devices, the export needs the network), after a failed export, or after
// someone removed one.
const replicaInterval = 5 * time.Second

// defaultReplicaPort is the NVMe/TCP port, IANA's for NVMe over TCP.
const defaultReplicaPort = 4420

// replicaAddress parses --replica-address: an IPv4 address with an
// optional port.
func replicaAddress(s string) (string, int, error) {
	host, port := s, defaultReplicaPort
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return "", 0, fmt.Errorf("%q: bad port %q", s, p)
		}
		host, port = h, n
	}
	if ip := net.ParseIP(host); ip == nil || ip.To4() == nil || ip.IsUnspecified() {
		return "", 0, fmt.Errorf("%q: want the IPv4 address peers reach this node's NVMe/TCP target at, optionally with :port", s)
	}
	return host, port, nil
}

// replicaFencer is the engine's ServeReplicas for a cluster that fenced
// nodes (engine.Engine.ServeReplicasFenced). An engine without it (the
// in-memory one of reconcile/reconciletest) serves every replica: the
// fence of an owner whose replica is kept here is then never
// acknowledged.
type replicaFencer interface {
	ServeReplicasFenced(ctx context.Context, addr string, port int, fenced map[string]bool) ([]engine.ReplicaInfo, error)
}

// replicaKept exports every replica now, but none whose owner is fenced,
// and, when what is served changed, publishes the node record at once:
// the owner waits for it to attach. It runs in the daemon's target round
// (serveTarget, every replicaInterval, without etcd too: a peer that
// rebooted serves its replicas again whether or not the cluster store
// answers) and when the controller kept a new replica.
func (d *daemon) replicaKept(ctx context.Context) {
	host, port, err := replicaAddress(d.cfg.ReplicaAddress)
	if err != nil {
		return // Validate refused it already
	}
	s := &d.tgt
	s.replicaRound.Lock()
	defer s.replicaRound.Unlock()
	fenced := s.fencedSet()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	var served []engine.ReplicaInfo
	if f, ok := d.eng.(replicaFencer); ok {
		served, err = f.ServeReplicasFenced(sctx, host, port, fenced)
	} else {
		served, err = d.eng.ServeReplicas(sctx, host, port)
	}
	cancel()
	cut := map[string]bool{}
	if err == nil {
		cut = fenced
		for _, r := range served {
			if fenced[r.Owner] && !r.Fenced {
				delete(cut, r.Owner)
				d.log.Error("replica of a fenced node still exported", "volume", r.Volume, "owner", r.Owner, "err", r.Error)
			}
		}
	}
	s.mu.Lock()
	s.replicasCut = cut
	s.mu.Unlock()
	if err != nil {
		d.log.Warn("serving replicas failed", "err", err)
		return
	}
	inv := replicaInventory(served)
	var rs []metrics.Replica
	for i, r := range inv {
		if served[i].Fenced {
			continue // withheld on purpose: no alert for it
		}
		rs = append(rs, metrics.Replica{Volume: r.Volume, Owner: r.Owner, Exported: r.Exported})
	}
	d.dmet.SetReplicas(rs)
	d.mu.Lock()
	changed := !reflect.DeepEqual(inv, d.replicas)
	d.replicas = inv
	d.mu.Unlock()
	if changed {
		d.keepNVMeAllowList(ctx) // the owner of a new replica is admitted now
		d.publishNow()
	}
}

// replicaInventory is the node record's view of the served replicas.
func replicaInventory(served []engine.ReplicaInfo) []api.ReplicaInventory {
	var out []api.ReplicaInventory
	for _, r := range served {
		out = append(out, api.ReplicaInventory{
			Volume: r.Volume, Owner: r.Owner, Pool: r.Pool, NQN: r.NQN, UUID: r.UUID,
			SizeBytes: r.Extent.Length * pool.SectorSize, Exported: r.Exported, Error: r.Error,
		})
	}
	return out
}
