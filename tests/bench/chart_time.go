// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// timeChart is a line chart of values over time in panels stacked on one
// time axis: the pressure run's IOPS second by second across its phases
// above, the cache's dirty share below. Vertical marks (a phase's start,
// the moment the write cache filled) cross every panel.
type timeChart struct {
	Title  string
	XLabel string
	Panels []timePanel // top to bottom; the first is twice as tall as each other
	Marks  []timeMark
}

// timePanel is one panel of a timeChart.
type timePanel struct {
	YLabel string
	// LogY draws the y axis in decades from logFloor up: a value below
	// the floor (a second in which no I/O completed) is drawn on it.
	LogY bool
	// YMax fixes the top of a linear axis (100 for a percentage); 0
	// takes it from the data.
	YMax   float64
	Series []timeSeries
}

// timeSeries is one line: a label (its colour follows it, as in
// barChart) and its points in time order. A point whose Y is NaN breaks
// the line there (no data: the time between two phases).
type timeSeries struct {
	Label  string
	Points plotter.XYs
}

// timeMark is a vertical line at X, labelled at the top of the chart.
type timeMark struct {
	X     float64
	Label string
}

// logFloor is the bottom of a log axis: 1 I/O per second.
const logFloor = 1

func (c timeChart) validate() error {
	if len(c.Panels) == 0 {
		return errors.New("no panels")
	}
	points := 0
	for i, p := range c.Panels {
		if len(p.Series) == 0 {
			return fmt.Errorf("panel %d: no series", i)
		}
		if n := len(okabeIto()); len(p.Series) > n {
			return fmt.Errorf("panel %d: %d series, at most %d (one per palette colour)", i, len(p.Series), n)
		}
		if p.YMax < 0 || math.IsNaN(p.YMax) || math.IsInf(p.YMax, 0) || (p.LogY && p.YMax != 0) {
			return fmt.Errorf("panel %d: YMax %v (a positive top for a linear axis only)", i, p.YMax)
		}
		seen := map[string]bool{}
		for _, s := range p.Series {
			if s.Label == "" || seen[s.Label] {
				return fmt.Errorf("panel %d: series label %q empty or used twice", i, s.Label)
			}
			seen[s.Label] = true
			for _, pt := range s.Points {
				if !finite(pt.X) || math.IsInf(pt.Y, 0) {
					return fmt.Errorf("panel %d, series %q: point (%v, %v) is not finite (a break is a NaN y)", i, s.Label, pt.X, pt.Y)
				}
			}
			points += len(s.Points)
		}
	}
	if points == 0 {
		return errors.New("no points")
	}
	for _, m := range c.Marks {
		if !finite(m.X) || m.Label == "" {
			return fmt.Errorf("mark %q at %v: want a label and a finite time", m.Label, m.X)
		}
	}
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// xRange is the time axis: every point and mark, from 0.
func (c timeChart) xRange() (lo, hi float64) {
	hi = 1
	for _, p := range c.Panels {
		for _, s := range p.Series {
			for _, pt := range s.Points {
				lo, hi = math.Min(lo, pt.X), math.Max(hi, pt.X)
			}
		}
	}
	for _, m := range c.Marks {
		lo, hi = math.Min(lo, m.X), math.Max(hi, m.X)
	}
	return lo, hi
}

// yRange is a panel's y axis: from 0 (linear) or logFloor (log, up to
// the next whole decade).
func (p timePanel) yRange() (lo, hi float64) {
	top := 0.0
	for _, s := range p.Series {
		for _, pt := range s.Points {
			if finite(pt.Y) {
				top = math.Max(top, pt.Y)
			}
		}
	}
	if p.LogY {
		return logFloor, math.Pow10(int(math.Ceil(math.Log10(math.Max(top, 10*logFloor)))))
	}
	if p.YMax > 0 {
		return 0, p.YMax
	}
	if top == 0 {
		return 0, 1
	}
	return 0, top * 1.08
}

// writePNG renders the chart at width×height to path.
func (c timeChart) writePNG(path string, width, height vg.Length) error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("chart %q: %w", c.Title, err)
	}
	if width <= 0 || height <= 0 {
		return fmt.Errorf("chart %q: size %v×%v", c.Title, width, height)
	}
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(chartDPI))
	if err := c.draw(draw.New(img)); err != nil {
		return fmt.Errorf("chart %q: %w", c.Title, err)
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return fmt.Errorf("chart %q: encode PNG: %w", c.Title, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("chart %q: %w", c.Title, err)
	}
	return nil
}

// draw stacks the panels on dc, each with its legend on the right, the
// title and the marks' labels above the first.
func (c timeChart) draw(dc draw.Canvas) error {
	xlo, xhi := c.xRange()
	title := plot.New().Title
	title.Text = c.Title
	titleH := title.TextStyle.Rectangle(c.Title).Size().Y + vg.Points(8)
	labelStyle := plot.New().X.Tick.Label
	labelStyle.Font.Size = vg.Points(8)
	marksH := vg.Length(0)
	if len(c.Marks) > 0 {
		marksH = labelStyle.Rectangle("X").Size().Y*2.5 + vg.Points(4)
	}
	title.TextStyle.XAlign = draw.XCenter
	dc.FillText(title.TextStyle, vg.Point{X: dc.Min.X + dc.Size().X/2, Y: dc.Max.Y - titleH + vg.Points(4)}, c.Title)
	body := draw.Crop(dc, 0, 0, 0, -(titleH + marksH))

	// Panel heights: the first counts twice.
	weights := 1.0 + float64(len(c.Panels)-1)*0.5
	top := body.Max.Y
	gap := vg.Points(12)
	var legendWidth vg.Length
	legends := make([]*plot.Legend, len(c.Panels))
	for i, p := range c.Panels {
		legends[i] = plotLegend(p, labelColours(seriesLabels(p.Series)))
		legendWidth = max(legendWidth, legends[i].Rectangle(body).Size().X)
	}
	plotRight := body.Max.X - legendWidth - 2*gap
	plots := make([]*plot.Plot, len(c.Panels))
	areas := make([]draw.Canvas, len(c.Panels))
	for i := range c.Panels {
		share := 0.5 / weights
		if i == 0 {
			share = 1 / weights
		}
		h := vg.Length(share) * body.Size().Y
		areas[i] = draw.Canvas{Canvas: body.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: body.Min.X, Y: top - h}, Max: vg.Point{X: plotRight, Y: top}}}
		top -= h
		pl, err := c.panelPlot(i, xlo, xhi)
		if err != nil {
			return err
		}
		plots[i] = pl
	}
	// Line the panels' data areas up on one time axis: each y axis takes
	// the width of its own tick labels, so every panel is moved right to
	// the widest one's edge.
	widest := vg.Length(0)
	for i, pl := range plots {
		widest = max(widest, pl.DataCanvas(areas[i]).Min.X-areas[i].Min.X)
	}
	for i, pl := range plots {
		inset := pl.DataCanvas(areas[i]).Min.X - areas[i].Min.X
		areas[i] = draw.Crop(areas[i], widest-inset, 0, 0, 0)
		pl.Draw(areas[i])
		legends[i].Draw(draw.Canvas{Canvas: body.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: plotRight + gap, Y: areas[i].Min.Y}, Max: vg.Point{X: body.Max.X, Y: areas[i].Max.Y}}})
	}
	// The marks' labels go above the first panel, in two rows, so that
	// marks a few seconds apart do not print over each other, clear of
	// the top tick label that reaches above the data area.
	trX, _ := plots[0].Transforms(&areas[0])
	row := labelStyle.Rectangle("X").Size().Y
	for k, m := range c.Marks {
		style := labelStyle
		style.XAlign = draw.XLeft
		y := body.Max.Y + row/2 + vg.Points(2) + vg.Length(k%2)*row
		dc.FillText(style, vg.Point{X: trX(m.X) + vg.Points(1), Y: y}, m.Label)
	}
	return nil
}

// panelPlot builds panel i's plot on the time axis xlo..xhi.
func (c timeChart) panelPlot(i int, xlo, xhi float64) (*plot.Plot, error) {
	p := c.Panels[i]
	pl := plot.New()
	pl.Y.Label.Text = p.YLabel
	pl.X.Min, pl.X.Max = xlo, xhi
	pl.Y.Min, pl.Y.Max = p.yRange()
	if i == len(c.Panels)-1 {
		pl.X.Label.Text = c.XLabel
	} else {
		pl.X.Tick.Label.Font.Size = 0 // the time axis is labelled once, at the bottom
	}
	if p.LogY {
		pl.Y.Scale = plot.LogScale{}
		pl.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	pl.X.Tick.Marker = wholeTicks{}
	pl.Add(plotter.NewGrid())
	colours := labelColours(seriesLabels(p.Series))
	for j, s := range p.Series {
		for _, seg := range segments(s.Points) {
			if p.LogY {
				for k := range seg {
					seg[k].Y = math.Max(seg[k].Y, logFloor)
				}
			}
			line, err := plotter.NewLine(seg)
			if err != nil {
				return nil, fmt.Errorf("panel %d, series %q: %w", i, s.Label, err)
			}
			line.LineStyle = draw.LineStyle{Color: colours[j], Width: vg.Points(1.5)}
			pl.Add(line)
		}
	}
	for _, m := range c.Marks {
		ml, err := plotter.NewLine(plotter.XYs{{X: m.X, Y: pl.Y.Min}, {X: m.X, Y: pl.Y.Max}})
		if err != nil {
			return nil, fmt.Errorf("mark %q: %w", m.Label, err)
		}
		ml.LineStyle = draw.LineStyle{Color: color.Gray{0x66}, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}
		pl.Add(ml)
	}
	return pl, nil
}

// segments splits points at NaN ys into the runs between them, copied;
// a run of one point is drawn as a line of one point (a dot's width).
func segments(pts plotter.XYs) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for _, p := range pts {
		if math.IsNaN(p.Y) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, p)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// wholeTicks are plot's default ticks labelled in whole numbers: the time
// axis counts seconds.
type wholeTicks struct{}

func (wholeTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = fmt.Sprintf("%.0f", ticks[i].Value)
		}
	}
	return ticks
}

// plotLegend is a panel's legend with its series' colours.
func plotLegend(p timePanel, colours []color.Color) *plot.Legend {
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.TextStyle.Font.Size = vg.Points(10)
	l.Padding = vg.Points(3)
	for i, s := range p.Series {
		l.Add(s.Label, &plotter.Line{LineStyle: draw.LineStyle{Color: colours[i], Width: vg.Points(2)}})
	}
	return &l
}

func seriesLabels(ss []timeSeries) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Label
	}
	return out
}
