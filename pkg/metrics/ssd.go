// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// Per-SSD health metrics, from the SSDSource (SMART / NVMe health log).

// ssdLabels label every per-SSD series but the info series: the model
// and serial number are on tidecache_ssd_info alone, one series per SSD
// (join on device for them), not repeated on each.
var ssdLabels = []string{"device"}

var (
	ssdInfoDesc = prometheus.NewDesc(namespace+"_ssd_info",
		"1 for each SSD of a pool whose health is read, with its model and serial number.",
		[]string{"device", "model", "serial"}, nil)
	ssdWearDesc = prometheus.NewDesc(namespace+"_ssd_wear_ratio",
		"Share of the SSD's rated endurance used (NVMe percentage used / 100); may exceed 1. Absent when the SSD does not report it.",
		ssdLabels, nil)
	ssdMediaErrorsDesc = prometheus.NewDesc(namespace+"_ssd_media_errors_total",
		"Unrecovered data-integrity errors over the SSD's life (NVMe media errors; ATA attribute 187).",
		ssdLabels, nil)
	ssdErrorLogDesc = prometheus.NewDesc(namespace+"_ssd_error_log_entries_total",
		"Entries of the SSD's error log over its life (NVMe num_err_log_entries; ATA SMART error log count).",
		ssdLabels, nil)
	ssdCriticalDesc = prometheus.NewDesc(namespace+"_ssd_critical_warning",
		"1 if the SSD raises a critical warning (NVMe critical warning not 0, or ATA SMART status failed).",
		ssdLabels, nil)
)

func describeSSD(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{ssdInfoDesc, ssdWearDesc, ssdMediaErrorsDesc, ssdErrorLogDesc, ssdCriticalDesc} {
		ch <- d
	}
}

// collectSSDs emits what the SSD source could read, and returns its error
// (some SSDs failed) after emitting the others.
func (c *collector) collectSSDs(ctx context.Context, ch chan<- prometheus.Metric,
	read func(context.Context) ([]SSDHealth, error)) error {
	ssds, err := read(ctx)
	for _, s := range ssds {
		gauge(ch, ssdInfoDesc, 1, s.Path, s.Model, s.Serial)
		l := []string{s.Path}
		if s.WearPercent != nil {
			gauge(ch, ssdWearDesc, float64(*s.WearPercent)/100, l...)
		}
		counter(ch, ssdMediaErrorsDesc, s.MediaErrors, l...)
		counter(ch, ssdErrorLogDesc, s.ErrorLogEntries, l...)
		gauge(ch, ssdCriticalDesc, boolValue(s.CriticalWarning), l...)
	}
	return err
}
