// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// replicaReport is the replicated run's report, which make bench writes
// beside this one before it: this report embeds its goals, so that every
// figure the benchmarks judge is in one document.
const replicaReport = "benchmarks-replica.md"

// writeReplicaGoals embeds the "Goals" section of the replicated run's
// report found beside outPath, with when it was generated; nothing when
// there is none (a quick run, or a report written elsewhere).
func (r *report) writeReplicaGoals(b *strings.Builder, outPath string) {
	if outPath == "" {
		return
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(outPath), replicaReport))
	if err != nil {
		return
	}
	goals, ok := markdownSection(string(data), "## Goals")
	if !ok {
		return
	}
	when := ""
	if _, rest, found := strings.Cut(string(data), ") on "); found {
		when, _, _ = strings.Cut(rest, ",")
	}
	fmt.Fprintf(b, "## Replicated write cache (`--protect peer`)\n\n"+
		"From [%s](%s), the replicated run (%s): the write cache mirrored to a peer VM over NVMe/TCP\n"+
		"(tc-wbp), and on two peers from a pool without SSDs (tc-wb2p), against the same cache unmirrored\n"+
		"(tc-wb), measured in the same run; its set-up, the rebuild, resync and move figures and the\n"+
		"per-workload results are there.\n\n%s\n", replicaReport, replicaReport, when, goals)
}

// markdownSection returns the body of the section under heading, up to
// the next heading of the same level, trimmed.
func markdownSection(doc, heading string) (string, bool) {
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return "", false
	}
	if body, _, found := strings.Cut(rest, "\n## "); found {
		rest = body
	}
	return strings.TrimSpace(rest) + "\n", true
}
