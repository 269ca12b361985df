// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
	"time"
)

// markdown renders the report as the section docs/benchmarks.md carries.
func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("## Control plane (host, faked device-mapper)\n\n")
	p("`go run ./tests/bench/controlplane -volumes %d -creates %d -scrape-volumes %d -ready-delay %s`, %s, %s, %d CPUs, on the host (no VM).\n\n",
		r.o.volumes, r.o.creates, r.o.scrapeVolumes, r.o.readyDelay, r.date.Format("2006-01-02 15:04 UTC"), r.goVersion, r.cpus)
	p("One process runs what `tidecached run --embedded-etcd` runs: an embedded etcd member (data in a temporary\n")
	p("directory), `pkg/store` and the `pkg/reconcile` controller with its default configuration (8 volumes\n")
	p("reconciled at once). Only the engine is faked: an in-memory `reconcile.Engine` whose CreateVolume\n")
	if r.o.readyDelay == 0 {
		p("returns at once (`-ready-delay 0s`), so these figures are the control plane's own cost; on a node,\n")
		p("loading and resuming the tables of a volume adds to the create latency.\n")
	} else {
		p("returns after a fake device-mapper delay of %s (`-ready-delay`), which stands for loading and\n", r.o.readyDelay)
		p("resuming the tables of a volume.\n")
	}
	p("Readiness is seen the way tidectl sees it: through an etcd watch on the volume statuses, a volume is\n")
	p("ready when its status is `active` with `observedRevision` at or above the spec's revision.\n\n")

	p("| Measure | Result |\n|---|---|\n")
	p("| create → ready, %d sequential creates (%d volumes already on the node), p50 / p99 | %s / %s |\n",
		len(r.createLat), r.o.volumes, ms(pct(r.createLat, 50)), ms(pct(r.createLat, 99)))
	p("| reconcile of %d volume specs written at once: all statuses active | %s (specs written in %s) |\n",
		r.o.volumes, ms(r.bulkTotal), ms(r.bulkWrite))
	p("| volumes converged per second / reconciles per second | %.0f / %.0f (%.0f reconciles) |\n",
		float64(r.o.volumes)/r.bulkTotal.Seconds(), r.reconciles/r.bulkTotal.Seconds(), r.reconciles)
	p("| daemon RSS after %d volumes converged (includes the embedded etcd) | %.1f MiB (peak %.1f MiB; Go heap in use %.1f MiB) |\n",
		r.o.volumes, float64(r.rssKiB)/1024, float64(r.hwmKiB)/1024, float64(r.heapBytes)/(1<<20))
	p("| scrape of `pkg/metrics` collectors, %d volumes, p50 / p99 of %d `Gather` | %s / %s |\n",
		r.o.scrapeVolumes, len(r.gatherLat), ms(pct(r.gatherLat, 50)), ms(pct(r.gatherLat, 99)))
	p("| exposition size, %d volumes (text format) | %d bytes, %d series |\n\n", r.o.scrapeVolumes, r.exposition, r.series)

	p("The scrape registry holds only `metrics.Register` over a fake source of %d volumes (half with a\n", r.o.scrapeVolumes)
	p("read tier, all with write-tier statistics), without dm-stats histograms or SSD health, so it times\n")
	p("the collectors and the Prometheus encoding, not reading the kernel's status. The reconciles count is\n")
	p("the increase of `tidecache_reconcile_total` over the bulk phase. With %d samples, the create p99 is\n", len(r.createLat))
	p("the slowest of them or close to it.\n")
	return b.String()
}

// ms formats d in milliseconds, with more digits under 10 ms.
func ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	if f < 10 {
		return fmt.Sprintf("%.2f ms", f)
	}
	return fmt.Sprintf("%.0f ms", f)
}
