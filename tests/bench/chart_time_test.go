// SPDX-License-Identifier: Apache-2.0

package main

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// pressureLikeChart is what the pressure run draws for one system: IOPS
// over four phases with a cliff to zero, and the dirty share below.
func pressureLikeChart() timeChart {
	var reads, writes, dirty plotter.XYs
	for s := 1; s <= 240; s++ {
		x := float64(s)
		w := 2000.0
		switch {
		case s > 20 && s <= 90:
			w = 0 // the cliff: nothing completes
			if s%7 == 0 {
				w = 4
			}
		case s > 90:
			w = 120
		}
		writes = append(writes, plotter.XY{X: x, Y: w})
		if s > 90 {
			reads = append(reads, plotter.XY{X: x, Y: 200 + 10*math.Sin(x)})
		}
		if s == 90 {
			// Between two phases: no data, the lines break.
			writes = append(writes, plotter.XY{X: x, Y: math.NaN()})
			continue
		}
		dirty = append(dirty, plotter.XY{X: x, Y: math.Min(100, float64(s)*5)})
	}
	return timeChart{
		Title: "tc-wb under pressure (mq-deadline)", XLabel: "seconds since the write phase began",
		Panels: []timePanel{
			{YLabel: "IOPS", LogY: true, Series: []timeSeries{{Label: "read", Points: reads}, {Label: "write", Points: writes}}},
			{YLabel: "dirty % of cache", YMax: 100, Series: []timeSeries{{Label: "dirty", Points: dirty}}},
		},
		Marks: []timeMark{{X: 0, Label: "4k random write"}, {X: 20, Label: "write cache full"}, {X: 90, Label: "8k 70/30 mix"}, {X: 150, Label: "read"}},
	}
}

func TestTimeChartWritePNG(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]timeChart{
		"pressure":  pressureLikeChart(),
		"one panel": {Title: "x", Panels: []timePanel{{YLabel: "IOPS", Series: []timeSeries{{Label: "write", Points: plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 0}}}}}}},
	} {
		path := filepath.Join(dir, name+".png")
		if err := c.writePNG(path, 12*vg.Inch, 6*vg.Inch); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 600 {
			t.Errorf("%s: %v, want 1200×600 (12×6 in at %d dpi)", name, b, chartDPI)
		}
	}
	if out := os.Getenv("BENCH_CHART_SAMPLE"); out != "" {
		// A look at the drawing: BENCH_CHART_SAMPLE=/tmp/x.png go test -run TimeChart
		if err := pressureLikeChart().writePNG(out, 12*vg.Inch, 6*vg.Inch); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTimeChartValidate(t *testing.T) {
	ok := pressureLikeChart()
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	line := func(label string, pts ...plotter.XY) timeSeries { return timeSeries{Label: label, Points: pts} }
	for name, c := range map[string]timeChart{
		"no panels":      {Title: "x"},
		"no series":      {Panels: []timePanel{{YLabel: "y"}}},
		"no points":      {Panels: []timePanel{{Series: []timeSeries{line("a")}}}},
		"label twice":    {Panels: []timePanel{{Series: []timeSeries{line("a", plotter.XY{}), line("a", plotter.XY{})}}}},
		"empty label":    {Panels: []timePanel{{Series: []timeSeries{line("", plotter.XY{})}}}},
		"infinite value": {Panels: []timePanel{{Series: []timeSeries{line("a", plotter.XY{X: 1, Y: math.Inf(-1)})}}}},
		"NaN time":       {Panels: []timePanel{{Series: []timeSeries{line("a", plotter.XY{X: math.NaN(), Y: 1})}}}},
		"infinite time":  {Panels: []timePanel{{Series: []timeSeries{line("a", plotter.XY{X: math.Inf(1)})}}}},
		"YMax on a log":  {Panels: []timePanel{{LogY: true, YMax: 100, Series: []timeSeries{line("a", plotter.XY{})}}}},
		"unlabeled mark": {Panels: ok.Panels, Marks: []timeMark{{X: 3}}},
	} {
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestTimePanelYRange(t *testing.T) {
	pts := func(ys ...float64) []timeSeries {
		var xy plotter.XYs
		for i, y := range ys {
			xy = append(xy, plotter.XY{X: float64(i), Y: y})
		}
		return []timeSeries{{Label: "a", Points: xy}}
	}
	for name, tc := range map[string]struct {
		p      timePanel
		lo, hi float64
	}{
		"log to the next decade":     {timePanel{LogY: true, Series: pts(0, 3, 2400)}, 1, 10000},
		"log of nothing but zeros":   {timePanel{LogY: true, Series: pts(0, 0)}, 1, 10},
		"linear with room above":     {timePanel{Series: pts(0, 50)}, 0, 54},
		"linear, fixed top":          {timePanel{YMax: 100, Series: pts(10, 20)}, 0, 100},
		"linear of nothing but zero": {timePanel{Series: pts(0)}, 0, 1},
	} {
		if lo, hi := tc.p.yRange(); math.Abs(lo-tc.lo) > 1e-9 || math.Abs(hi-tc.hi) > 1e-9 {
			t.Errorf("%s: %v..%v, want %v..%v", name, lo, hi, tc.lo, tc.hi)
		}
	}
}

func TestSegments(t *testing.T) {
	nan := math.NaN()
	got := segments(plotter.XYs{{X: 0, Y: nan}, {X: 1, Y: 1}, {X: 2, Y: 2}, {X: 3, Y: nan}, {X: 4, Y: nan}, {X: 5, Y: 5}})
	if len(got) != 2 || len(got[0]) != 2 || got[0][1].Y != 2 || len(got[1]) != 1 || got[1][0].X != 5 {
		t.Errorf("segments: %v, want [(1,1) (2,2)] [(5,5)]", got)
	}
	if got := segments(plotter.XYs{{X: 0, Y: nan}}); len(got) != 0 {
		t.Errorf("segments of a break alone: %v", got)
	}
}
