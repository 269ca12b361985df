// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
)

// wideChart is the largest chart writePNG must keep readable: 8 series,
// 16 groups with long names, values over four decades, gaps.
func wideChart(logY bool) barChart {
	c := barChart{
		Title: "4 KiB random I/O", YLabel: "IOPS", LogY: logY,
		RefLine: 0.9, RefLabel: "target (0.9× raw SSD)",
	}
	for g := range 16 {
		c.Groups = append(c.Groups, fmt.Sprintf("randwrite-fsync-qd%d", g+1))
	}
	for s := range 8 {
		v := make([]float64, len(c.Groups))
		for g := range v {
			v[g] = math.Pow(10, float64((s+g)%5)-1)
		}
		v[s] = math.NaN()
		v[s+1] = -1
		c.Series = append(c.Series, chartSeries{Label: fmt.Sprintf("system %c", 'A'+s), Values: v})
	}
	return c
}

func TestBarChartWritePNG(t *testing.T) {
	tests := []struct {
		name          string
		chart         barChart
		width, height vg.Length
	}{
		{"8 series 16 groups linear", wideChart(false), 12 * vg.Inch, 5 * vg.Inch},
		{"8 series 16 groups log", wideChart(true), 12 * vg.Inch, 5 * vg.Inch},
		{
			name: "one bar",
			chart: barChart{
				Title: "tps", Groups: []string{"oltp_read_write"},
				Series: []chartSeries{{Label: "cached", Values: []float64{1828.05}}},
			},
			width: 4 * vg.Inch, height: 3 * vg.Inch,
		},
		{
			name: "nothing measured, log",
			chart: barChart{
				Title: "tps", Groups: []string{"a", "b"}, LogY: true,
				Series: []chartSeries{{Label: "cached", Values: []float64{math.NaN(), 0}}},
			},
			width: 6 * vg.Inch, height: 4 * vg.Inch,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "chart.png")
			if err := tt.chart.writePNG(path, tt.width, tt.height); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			img, err := png.Decode(f)
			if err != nil {
				t.Fatalf("%s is not a PNG: %v", path, err)
			}
			wantW, wantH := int(tt.width/vg.Inch*chartDPI+0.5), int(tt.height/vg.Inch*chartDPI+0.5)
			if b := img.Bounds(); b.Dx() != wantW || b.Dy() != wantH {
				t.Errorf("image is %d×%d pixels, want %d×%d", b.Dx(), b.Dy(), wantW, wantH)
			}
		})
	}
}

func TestBarChartValidate(t *testing.T) {
	ok := func() barChart {
		return barChart{
			Title: "t", Groups: []string{"a", "b"},
			Series: []chartSeries{{Label: "x", Values: []float64{1, 2}}, {Label: "y", Values: []float64{3, math.NaN()}}},
		}
	}
	tests := []struct {
		name    string
		edit    func(*barChart)
		size    vg.Length
		wantErr string
	}{
		{"no groups", func(c *barChart) { c.Groups = nil }, vg.Inch, "no groups"},
		{"no series", func(c *barChart) { c.Series = nil }, vg.Inch, "no series"},
		{"too many values", func(c *barChart) { c.Series[1].Values = []float64{1, 2, 3} }, vg.Inch, `series "y": 3 values for 2 groups`},
		{"too few values", func(c *barChart) { c.Series[0].Values = nil }, vg.Inch, `series "x": 0 values for 2 groups`},
		{"too many series", func(c *barChart) {
			for i := range 7 {
				c.Series = append(c.Series, chartSeries{Label: fmt.Sprint(i), Values: []float64{1, 1}})
			}
		}, vg.Inch, "9 series, at most 8"},
		{"duplicate label", func(c *barChart) { c.Series[1].Label = "x" }, vg.Inch, `series "x": label used twice`},
		{"empty label", func(c *barChart) { c.Series[0].Label = "" }, vg.Inch, "series 0: no label"},
		{"infinite value", func(c *barChart) { c.Series[0].Values[1] = math.Inf(1) }, vg.Inch, `series "x", group "b": infinite value`},
		{"unlabelled reference", func(c *barChart) { c.RefLine = 0.9 }, vg.Inch, "no RefLabel"},
		{"zero size", func(*barChart) {}, 0, "size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok()
			tt.edit(&c)
			path := filepath.Join(t.TempDir(), "chart.png")
			err := c.writePNG(path, tt.size, tt.size)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), `chart "t": `) {
				t.Errorf("error %q does not name the chart", err)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("a failed chart left a file behind (%v)", err)
			}
		})
	}
}

// A system keeps its colour whatever the order of the series, and no two
// series of a chart share one.
func TestBarChartColoursFollowLabels(t *testing.T) {
	a := wideChart(false)
	b := a
	b.Series = append([]chartSeries(nil), a.Series...)
	for i, j := 0, len(b.Series)-1; i < j; i, j = i+1, j-1 {
		b.Series[i], b.Series[j] = b.Series[j], b.Series[i]
	}
	colourOf := func(c barChart) map[string]string {
		m := make(map[string]string)
		for i, col := range c.colours() {
			m[c.Series[i].Label] = fmt.Sprint(col)
		}
		return m
	}
	ca, cb := colourOf(a), colourOf(b)
	used := make(map[string]string)
	for label, col := range ca {
		if cb[label] != col {
			t.Errorf("%s: colour %s, then %s after reordering", label, col, cb[label])
		}
		if other, ok := used[col]; ok {
			t.Errorf("%s and %s share colour %s", label, other, col)
		}
		used[col] = label
	}
}
