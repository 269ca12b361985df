// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"image/color"
	"math"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// chartDPI is the resolution of the PNGs: a 12×5 inch chart is 1200×500
// pixels, sharp enough on a screen and small enough to commit.
const chartDPI = 100

// chartSeries is one bar colour: one system under test, a value per group.
type chartSeries struct {
	Label  string
	Values []float64 // one per group; NaN or a negative value means "not measured" (no bar)
}

// barChart describes a grouped bar chart.
type barChart struct {
	Title    string
	YLabel   string
	Groups   []string      // x-axis categories (workload names), shown under each group
	Series   []chartSeries // bars within each group, in this order, each with its own colour and a legend entry
	RefLine  float64       // if > 0, a dashed horizontal line at this y value (e.g. the 0.9 target), labelled in the legend as RefLabel
	RefLabel string
	LogY     bool // logarithmic y axis (values span 100× and more)
}

// okabeIto is the Okabe–Ito palette: eight colours that stay distinct for
// the common forms of colour blindness. Its size bounds the number of
// series, since two series sharing a colour could not be told apart.
func okabeIto() []color.Color {
	return []color.Color{
		color.RGBA{0x00, 0x00, 0x00, 0xff}, // black
		color.RGBA{0xe6, 0x9f, 0x00, 0xff}, // orange
		color.RGBA{0x56, 0xb4, 0xe9, 0xff}, // sky blue
		color.RGBA{0x00, 0x9e, 0x73, 0xff}, // bluish green
		color.RGBA{0xf0, 0xe4, 0x42, 0xff}, // yellow
		color.RGBA{0x00, 0x72, 0xb2, 0xff}, // blue
		color.RGBA{0xd5, 0x5e, 0x00, 0xff}, // vermillion
		color.RGBA{0xcc, 0x79, 0xa7, 0xff}, // reddish purple
	}
}

// measured reports whether v is a value to draw: the bench marks what it
// could not measure with NaN or a negative number.
func measured(v float64) bool { return v >= 0 }

func (c barChart) validate() error {
	if len(c.Groups) == 0 {
		return errors.New("no groups")
	}
	if len(c.Series) == 0 {
		return errors.New("no series")
	}
	if n := len(okabeIto()); len(c.Series) > n {
		return fmt.Errorf("%d series, at most %d (one per palette colour)", len(c.Series), n)
	}
	labels := make(map[string]bool, len(c.Series))
	for i, s := range c.Series {
		if s.Label == "" {
			return fmt.Errorf("series %d: no label", i)
		}
		if labels[s.Label] {
			return fmt.Errorf("series %q: label used twice", s.Label)
		}
		labels[s.Label] = true
		if len(s.Values) != len(c.Groups) {
			return fmt.Errorf("series %q: %d values for %d groups", s.Label, len(s.Values), len(c.Groups))
		}
		for j, v := range s.Values {
			if math.IsInf(v, 0) {
				return fmt.Errorf("series %q, group %q: infinite value", s.Label, c.Groups[j])
			}
		}
	}
	if math.IsNaN(c.RefLine) || math.IsInf(c.RefLine, 0) {
		return fmt.Errorf("reference line at %v", c.RefLine)
	}
	if c.RefLine > 0 && c.RefLabel == "" {
		return fmt.Errorf("reference line at %v has no RefLabel for the legend", c.RefLine)
	}
	return nil
}

// colours gives each series its colour. The colour follows the label, not
// the position, so that a system keeps its colour from one chart to the
// next: a label hashes to its preferred colour, and labels are served in
// sorted order, each taking the next free colour after its preferred one
// if that is taken. The same set of labels thus gets the same colours
// whatever the series order, and a subset mostly keeps them.
func (c barChart) colours() []color.Color {
	labels := make([]string, len(c.Series))
	for i, s := range c.Series {
		labels[i] = s.Label
	}
	return labelColours(labels)
}

// labelColours gives each of labels (distinct, at most the palette's
// size) its colour, as barChart.colours explains: time charts use it too,
// so a label has one colour in every chart.
func labelColours(labels []string) []color.Color {
	palette := okabeIto()
	taken := make([]bool, len(palette))
	byLabel := make(map[string]color.Color, len(labels))
	sorted := slices.Sorted(slices.Values(labels))
	for _, l := range sorted {
		h := fnv.New32a()
		h.Write([]byte(l))
		i := int(h.Sum32() % uint32(len(palette)))
		for taken[i] {
			i = (i + 1) % len(palette)
		}
		taken[i] = true
		byLabel[l] = palette[i]
	}
	out := make([]color.Color, len(labels))
	for i, l := range labels {
		out[i] = byLabel[l]
	}
	return out
}

// yRange is the y axis extent: from 0 on a linear axis, with a little
// room above the tallest bar; on a log axis, whole decades around the
// measured values and the reference line, so that both ends have a
// labelled tick.
func (c barChart) yRange() (lo, hi float64) {
	lo, hi = math.Inf(1), 0.0
	see := func(v float64) {
		if v > 0 {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	for _, s := range c.Series {
		for _, v := range s.Values {
			if measured(v) {
				see(v)
			}
		}
	}
	see(c.RefLine)
	if !c.LogY {
		if hi == 0 {
			return 0, 1
		}
		return 0, hi * 1.08
	}
	if hi == 0 {
		return 1, 10
	}
	// At least a factor of 2 below the smallest value, so that its bar
	// shows; math.Pow10 gives the very values plot.LogTicks puts its
	// labelled ticks at.
	lo = math.Pow10(int(math.Floor(math.Log10(lo / 2))))
	hi = math.Pow10(int(math.Ceil(math.Log10(hi))))
	return lo, hi
}

// groupedBars draws the bars of all series. It does not use
// plotter.BarChart, which can neither leave a bar out (it rejects NaN) nor
// start a bar anywhere but at 0, which a log axis cannot show.
type groupedBars struct {
	chart   barChart
	colours []color.Color
}

// groupFill is the share of a group's slot on the x axis that its bars
// fill; the rest separates groups. Each bar gets groupFill/len(Series), so
// bars narrow as series are added and groups never overlap.
const groupFill = 0.8

// Plot implements plot.Plotter.
func (b groupedBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	base := 0.0
	if b.chart.LogY {
		base = p.Y.Min
	}
	outline := draw.LineStyle{Color: color.Gray{0x40}, Width: vg.Points(0.5)}
	w := groupFill / float64(len(b.chart.Series))
	for s, series := range b.chart.Series {
		for g, v := range series.Values {
			// On a log axis a measured 0 has nowhere to go: no bar,
			// like a value that was not measured.
			if !measured(v) || v <= base {
				continue
			}
			x0 := float64(g) - groupFill/2 + float64(s)*w
			pts := []vg.Point{
				{X: trX(x0), Y: trY(base)},
				{X: trX(x0), Y: trY(v)},
				{X: trX(x0 + w), Y: trY(v)},
				{X: trX(x0 + w), Y: trY(base)},
			}
			c.FillPolygon(b.colours[s], c.ClipPolygonY(pts))
			c.StrokeLines(outline, c.ClipLinesY(append(pts, pts[0]))...)
		}
	}
}

// writePNG renders the chart at width×height (e.g. 12×5 inches at 100 dpi is fine) to path.
func (c barChart) writePNG(path string, width, height vg.Length) error {
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
	// One write of the whole file: an error leaves no half-drawn chart
	// that looks like a result.
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("chart %q: %w", c.Title, err)
	}
	return nil
}

// draw lays the chart out on dc: the plot on the left, the legend in a
// column on its right, outside the data area so it never hides a bar.
func (c barChart) draw(dc draw.Canvas) error {
	p := plot.New()
	p.Title.Text = c.Title
	p.Title.Padding = vg.Points(6)
	p.Y.Label.Text = c.YLabel
	p.X.Min, p.X.Max = -0.5, float64(len(c.Groups))-0.5
	p.Y.Min, p.Y.Max = c.yRange()
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}

	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	colours := c.colours()
	p.Add(grid, groupedBars{chart: c, colours: colours})

	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(10)
	legend.Padding = vg.Points(3)
	for i, s := range c.Series {
		legend.Add(s.Label, &plotter.BarChart{Color: colours[i], LineStyle: draw.LineStyle{Color: color.Gray{0x40}, Width: vg.Points(0.5)}})
	}
	if c.RefLine > 0 {
		ref, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: c.RefLine}, {X: p.X.Max, Y: c.RefLine}})
		if err != nil {
			return fmt.Errorf("reference line: %w", err)
		}
		ref.LineStyle = draw.LineStyle{Color: color.Gray{0x55}, Width: vg.Points(1.5), Dashes: []vg.Length{vg.Points(6), vg.Points(3)}}
		p.Add(ref)
		legend.Add(c.RefLabel, ref)
	}

	gap := vg.Points(12)
	legendWidth := legend.Rectangle(dc).Size().X
	plotArea := draw.Crop(dc, 0, -(legendWidth + 2*gap), 0, 0)
	c.fitGroupLabels(p, plotArea.Size().X)
	p.NominalX(c.Groups...)
	p.Draw(plotArea)

	// The legend starts level with the top of the data area, below the title.
	top := p.Title.TextStyle.Rectangle(c.Title).Size().Y + p.Title.Padding
	legend.Draw(draw.Crop(dc, dc.Size().X-legendWidth-gap, -gap, 0, -top))
	return nil
}

// fitGroupLabels turns the x tick labels by 30° when the widest would not
// fit under its group, as long workload names over 16 groups would not.
func (c barChart) fitGroupLabels(p *plot.Plot, plotWidth vg.Length) {
	// The y axis takes about an inch of the plot's width.
	slot := (plotWidth - vg.Inch) / vg.Length(len(c.Groups))
	widest := vg.Length(0)
	for _, g := range c.Groups {
		widest = max(widest, p.X.Tick.Label.Width(g))
	}
	if widest <= 0.9*slot {
		return
	}
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
}
