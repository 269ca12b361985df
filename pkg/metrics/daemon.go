// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// DaemonMetrics are tidecached's own gauges, set by the daemon as things
// happen (not read at scrape time: there is no kernel state behind them).
// A nil *DaemonMetrics is valid and records nothing.
type DaemonMetrics struct {
	etcdUp prometheus.Gauge
	leader prometheus.Gauge
	// replicaExported has a series per replica the node keeps for
	// another node's mirror.
	replicaExported *prometheus.GaugeVec
	// exportHosts has a series per shared device the node exports.
	exportHosts   *prometheus.GaugeVec
	fencesApplied prometheus.Gauge
	nvmeNoAuth    prometheus.Gauge
	nvmeAllowed   prometheus.Gauge
}

// Replica is one replica the node keeps, for SetReplicas.
type Replica struct {
	Volume, Owner string
	Exported      bool
}

// NewDaemonMetrics registers tidecache_etcd_up, tidecache_leader (both 0
// until set) and tidecache_build_info{version} with reg.
func NewDaemonMetrics(reg prometheus.Registerer, version string) (*DaemonMetrics, error) {
	d := &DaemonMetrics{
		etcdUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "etcd_up",
			Help: "1 when the cluster store (etcd) answered the daemon's last request or health check, else 0. The kernel tables and I/O are unaffected while it is 0.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "leader",
			Help: "1 while this node holds the cluster leadership (placement of new volumes), else 0.",
		}),
		replicaExported: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "replica_exported",
			Help: "Per replica this node keeps for another node's mirrored write cache (--protect peer): 1 while it is exported over NVMe/TCP to its owner, 0 when it is not (the owner's mirror then runs on one copy).",
		}, []string{"volume", "owner"}),
		exportHosts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "export_hosts",
			Help: "Per shared device this node exports (tidecached run --export): the number of nodes it is exported to now, each through its own NVMe/TCP subsystem.",
		}, []string{"export"}),
		fencesApplied: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "fences_applied",
			Help: "Fenced nodes this node has cut off from everything it serves (exports and replicas) and acknowledged.",
		}),
		nvmeNoAuth: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "nvme_unauthenticated",
			Help: "1 when this node serves NVMe/TCP on a network address and may admit a host without in-band authentication (a kernel without it, or --insecure-nvme): only its source-address allow-list keeps other machines from connecting as such a host.",
		}),
		nvmeAllowed: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "nvme_allowed_addresses",
			Help: "Source addresses the allow-list of this node's NVMe/TCP port admits (the nodes its subsystems allow, fenced ones left out); 0 while none is applied: the node serves no NVMe/TCP, or etcd has not answered since a first start.",
		}),
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Always 1; the version label is the version tidecached was built from.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	build.Set(1)
	for _, c := range []prometheus.Collector{d.etcdUp, d.leader, d.replicaExported, d.exportHosts, d.fencesApplied, d.nvmeNoAuth, d.nvmeAllowed, build} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register daemon metrics: %w", err)
		}
	}
	return d, nil
}

// SetEtcdUp records whether the cluster store is reachable.
func (d *DaemonMetrics) SetEtcdUp(up bool) {
	if d != nil {
		d.etcdUp.Set(boolValue(up))
	}
}

// SetReplicas records the replicas the node keeps and whether each is
// exported; replicas no longer kept lose their series.
func (d *DaemonMetrics) SetReplicas(rs []Replica) {
	if d == nil {
		return
	}
	d.replicaExported.Reset()
	for _, r := range rs {
		d.replicaExported.WithLabelValues(r.Volume, r.Owner).Set(boolValue(r.Exported))
	}
}

// SetExports records, by export name, how many nodes each shared device
// is exported to; exports no longer served lose their series.
func (d *DaemonMetrics) SetExports(hosts map[string]int) {
	if d == nil {
		return
	}
	d.exportHosts.Reset()
	for name, n := range hosts {
		d.exportHosts.WithLabelValues(name).Set(float64(n))
	}
}

// SetFencesApplied records how many fences this node has carried out.
func (d *DaemonMetrics) SetFencesApplied(n int) {
	if d != nil {
		d.fencesApplied.Set(float64(n))
	}
}

// SetNVMeUnauthenticated records whether this node serves NVMe/TCP on a
// network address without in-band authentication.
func (d *DaemonMetrics) SetNVMeUnauthenticated(on bool) {
	if d != nil {
		d.nvmeNoAuth.Set(map[bool]float64{true: 1}[on])
	}
}

// SetNVMeAllowed records how many addresses the NVMe/TCP allow-list
// admits.
func (d *DaemonMetrics) SetNVMeAllowed(n int) {
	if d != nil {
		d.nvmeAllowed.Set(float64(n))
	}
}

// SetLeader records whether this node is the cluster leader.
func (d *DaemonMetrics) SetLeader(leader bool) {
	if d != nil {
		d.leader.Set(boolValue(leader))
	}
}
