// SPDX-License-Identifier: Apache-2.0

package testbed

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// FormatBytes prints a size in binary units: "4 KiB", "32 MiB".
func FormatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d %s", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// FormatIOPS prints an IOPS figure with three significant digits at most
// below 1,000 and thousands separators above: "71.9", "2,731".
func FormatIOPS(v float64) string {
	switch {
	case v >= 1000:
		return withCommas(int64(v + 0.5))
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func withCommas(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// FormatLatency prints a latency in the unit a storage engineer reads it
// in: "85 µs", "0.42 ms", "12.1 ms", "1.20 s". Zero prints as "-".
func FormatLatency(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 100*time.Microsecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

// FormatRatio prints a ratio as "0.93×" (two decimals below 10, one
// above 10, none above 100).
func FormatRatio(r float64) string {
	switch {
	case r <= 0:
		return "-"
	case r >= 100:
		return fmt.Sprintf("%.0f×", r)
	case r >= 10:
		return fmt.Sprintf("%.1f×", r)
	default:
		return fmt.Sprintf("%.2f×", r)
	}
}

// Table is a small table printed as aligned text for a terminal or as a
// GitHub markdown table for docs. Columns after the first are right
// aligned: they hold numbers.
type Table struct {
	Header []string
	Rows   [][]string
}

// Add appends a row.
func (t *Table) Add(cells ...string) { t.Rows = append(t.Rows, cells) }

func (t *Table) widths() []int {
	w := make([]int, len(t.Header))
	for _, row := range append([][]string{t.Header}, t.Rows...) {
		for i, c := range row {
			if i < len(w) {
				w[i] = max(w[i], utf8.RuneCountInString(c))
			}
		}
	}
	return w
}

func pad(s string, width int, right bool) string {
	fill := strings.Repeat(" ", max(0, width-utf8.RuneCountInString(s)))
	if right {
		return fill + s
	}
	return s + fill
}

// WriteText prints the table with aligned columns and a rule under the
// header.
func (t *Table) WriteText(w io.Writer) error {
	widths := t.widths()
	var b strings.Builder
	line := func(row []string) {
		var l strings.Builder
		for i := range widths {
			c := ""
			if i < len(row) {
				c = row[i]
			}
			if i > 0 {
				l.WriteString("  ")
			}
			l.WriteString(pad(c, widths[i], i > 0))
		}
		b.WriteString(strings.TrimRight(l.String(), " ") + "\n")
	}
	line(t.Header)
	rule := make([]string, len(widths))
	for i, n := range widths {
		rule[i] = strings.Repeat("-", n)
	}
	line(rule)
	for _, r := range t.Rows {
		line(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdown prints the table as a GitHub markdown table; a "|" in a
// cell (O_DIRECT|O_SYNC) is escaped so that it does not split the cell.
func (t *Table) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	esc := strings.NewReplacer("|", `\|`)
	row := func(cells []string) {
		out := make([]string, len(t.Header))
		for i := range out {
			if i < len(cells) {
				out[i] = esc.Replace(cells[i])
			}
		}
		b.WriteString("| " + strings.Join(out, " | ") + " |\n")
	}
	row(t.Header)
	b.WriteString("|")
	for i := range t.Header {
		if i == 0 {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		row(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
