// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
)

// PrintJSON writes v as indented JSON.
func PrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printYAML writes v as YAML with the same field names as its JSON, so
// both formats share one schema.
func printYAML(w io.Writer, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	_, err = w.Write(b)
	return err
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cols ...string) { fmt.Fprintln(t.tw, strings.Join(cols, "\t")) }
func (t *table) flush() error       { return t.tw.Flush() }

// size prints a byte count in binary units: the one formatter tidecache
// uses everywhere (pool.FormatBytes: "64 MiB", "1536 MiB", "3.9 MiB").
func size(n uint64) string { return pool.FormatBytes(n) }

func percent(r float64) string { return fmt.Sprintf("%.1f%%", r*100) }

// progressPrinter prints drain and flush progress, at most once a second,
// as one updating line on a terminal and as plain lines otherwise.
type progressPrinter struct {
	w    io.Writer
	tty  bool
	last time.Time
}

func newProgressPrinter(w io.Writer) *progressPrinter {
	return &progressPrinter{w: w, tty: isTerminal(w)}
}

func (p *progressPrinter) print(pr engine.Progress) {
	now := time.Now()
	if !p.last.IsZero() && now.Sub(p.last) < time.Second && pr.DirtyBlocks != 0 {
		return
	}
	p.last = now
	done := 100.0
	if pr.StartBlocks > 0 {
		done = 100 * float64(pr.StartBlocks-min(pr.DirtyBlocks, pr.StartBlocks)) / float64(pr.StartBlocks)
	}
	eta := "ETA unknown"
	if pr.ETA > 0 {
		eta = "ETA " + pr.ETA.Round(time.Second).String()
	} else if pr.DirtyBlocks == 0 {
		eta = "done"
	}
	line := fmt.Sprintf("%s %s: %d dirty blocks (%s) left, %.0f%% written back, %.0f blocks/s, %s",
		pr.Phase, pr.Volume, pr.DirtyBlocks, size(pr.DirtyBlocks*uint64(pr.BlockSize)), done, pr.BlocksPerSecond, eta)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

// end finishes an updating line.
func (p *progressPrinter) end() {
	if p.tty && !p.last.IsZero() {
		fmt.Fprintln(p.w)
	}
}
