// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidecache/tidecache/pkg/api"
)

// Reconcile outcomes, the values of the result label.
const (
	ResultSuccess       = "success"
	ResultRequeueAfter  = "requeue_after"
	ResultError         = "error"
	ResultTerminalError = "terminal_error"
)

// Drift actions, the values of the action label.
const (
	DriftRepaired = "repaired"
	DriftReported = "reported"
)

// Metrics are the controller's Prometheus collectors. A nil *Metrics is
// valid and records nothing. The store's reachability is not among them:
// tidecache_etcd_up belongs to pkg/metrics (DaemonMetrics.SetEtcdUp), which
// the daemon feeds from Config.OnEtcdUp.
type Metrics struct {
	reconciles *prometheus.CounterVec
	duration   prometheus.Histogram
	errors     prometheus.Counter
	unmanaged  prometheus.Gauge
	invalid    prometheus.Counter
	drift      *prometheus.CounterVec
	claims     *prometheus.GaugeVec
}

// NewMetrics creates the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidecache_reconcile_total",
			Help: "Volume reconciles by result (success, requeue_after, error, terminal_error).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tidecache_reconcile_duration_seconds",
			Help: "Time one volume reconcile took, including mode changes and flushes it waited for.",
			// 5 ms to about 20 min: a mode change drains the write tier.
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10),
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidecache_reconcile_errors_total",
			Help: "Volume reconciles that failed, transient or terminal.",
		}),
		unmanaged: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidecache_unmanaged_volumes",
			Help: "Volumes present on this node with no volume spec for this node; reported, never deleted automatically.",
		}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidecache_store_invalid_records_total",
			Help: "Malformed or unknown-version records seen in the cluster store and skipped.",
		}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidecache_drift_total",
			Help: "Volumes found with device tables differing from their layout, by action taken (repaired, reported).",
		}, []string{"action"}),
		// The labels are kube-state-metrics' names for a claim, so that a
		// query joins it with the claim's other series.
		claims: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidecache_volume_claim_info",
			Help: "The Kubernetes PersistentVolumeClaim a volume of this node was made for (always 1); join on volume for a claim's cache metrics.",
		}, []string{"volume", "namespace", "persistentvolumeclaim"}),
	}
	for _, r := range []string{ResultSuccess, ResultRequeueAfter, ResultError, ResultTerminalError} {
		m.reconciles.WithLabelValues(r)
	}
	for _, a := range []string{DriftRepaired, DriftReported} {
		m.drift.WithLabelValues(a)
	}
	for _, c := range []prometheus.Collector{m.reconciles, m.duration, m.errors, m.unmanaged, m.invalid, m.drift, m.claims} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register reconcile metrics: %w", err)
		}
	}
	return m, nil
}

// observe records one reconcile.
func (m *Metrics) observe(result string, seconds float64) {
	if m == nil {
		return
	}
	m.reconciles.WithLabelValues(result).Inc()
	m.duration.Observe(seconds)
	if result == ResultError || result == ResultTerminalError {
		m.errors.Inc()
	}
}

func (m *Metrics) setUnmanaged(n int) {
	if m != nil {
		m.unmanaged.Set(float64(n))
	}
}

// setClaim records the claim a volume this node runs was made for; nil
// (no claim, or the volume is not this node's) removes the volume's
// series.
func (m *Metrics) setClaim(volume string, claim *api.Claim) {
	if m == nil {
		return
	}
	m.claims.DeletePartialMatch(prometheus.Labels{"volume": volume})
	if claim != nil {
		m.claims.WithLabelValues(volume, claim.Namespace, claim.Name).Set(1)
	}
}

func (m *Metrics) invalidRecords(n int) {
	if m != nil && n > 0 {
		m.invalid.Add(float64(n))
	}
}

func (m *Metrics) driftSeen(action string) {
	if m != nil {
		m.drift.WithLabelValues(action).Inc()
	}
}
