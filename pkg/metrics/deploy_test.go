// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The files these tests check, relative to this package.
var (
	docsFile      = filepath.Join("..", "..", "docs", "metrics.md")
	dashboardFile = filepath.Join("..", "..", "deploy", "grafana", "tidecache.json")
	rulesFile     = filepath.Join("..", "..", "deploy", "prometheus", "tidecache-alerts.yml")
	rulesTestFile = filepath.Join("..", "..", "deploy", "prometheus", "tidecache-alerts.test.yml")
)

var (
	docsRowRE    = regexp.MustCompile("(?m)^\\| `(tidecache_[a-z0-9_]+)` \\| (counter|gauge|histogram) \\|")
	metricNameRE = regexp.MustCompile(`\btidecache_[a-z0-9_]+`)
)

// documented returns the metrics docs/metrics.md lists, by type.
func documented(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range docsRowRE.FindAllStringSubmatch(string(b), -1) {
		if _, dup := out[m[1]]; dup {
			t.Errorf("docs/metrics.md lists %s twice", m[1])
		}
		out[m[1]] = m[2]
	}
	if len(out) == 0 {
		t.Fatal("no metric rows found in docs/metrics.md")
	}
	return out
}

// known reports whether name is a documented series, counting the
// _bucket, _sum and _count series of histograms.
func known(docs map[string]string, name string) bool {
	if _, ok := docs[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && docs[base] == "histogram" {
			return true
		}
	}
	return false
}

// checkNames fails for every tidecache_ name in text that is not
// documented.
func checkNames(t *testing.T, docs map[string]string, where, text string) int {
	t.Helper()
	n := 0
	for _, loc := range metricNameRE.FindAllStringIndex(text, -1) {
		name := text[loc[0]:loc[1]]
		if loc[0] > 0 && text[loc[0]-1] == ':' {
			// Inside a recording rule's level:metric:operations name:
			// recorded by the rules file, documented with it.
			if !strings.Contains(string(mustRead(t, docsFile)), "`"+recordedName(text, loc)+"`") {
				t.Errorf("%s: recording rule %s is not documented", where, recordedName(text, loc))
			}
			n++
			continue
		}
		n++
		if !known(docs, name) {
			t.Errorf("%s: %s is not a documented metric", where, name)
		}
	}
	return n
}

// recordedName is the whole level:metric:operations name around the
// metric name at loc.
func recordedName(text string, loc []int) string {
	start, end := loc[0], loc[1]
	for start > 0 && (text[start-1] == ':' || text[start-1] == '_' || isAlnum(text[start-1])) {
		start--
	}
	for end < len(text) && (text[end] == ':' || text[end] == '_' || isAlnum(text[end])) {
		end++
	}
	return text[start:end]
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDocsListEveryMetric(t *testing.T) {
	docs := documented(t)
	for _, name := range describedNames(t) {
		if _, ok := docs[name]; !ok {
			t.Errorf("%s is not listed in docs/metrics.md", name)
		}
	}
	// The types in the docs are the exported ones.
	text := string(exposition(t))
	for name, typ := range docs {
		if strings.Contains(text, "# TYPE "+name+" ") && !strings.Contains(text, "# TYPE "+name+" "+typ+"\n") {
			t.Errorf("docs/metrics.md says %s is a %s; the exposition disagrees", name, typ)
		}
	}
	// The example queries use documented names only.
	b, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	for i, block := range strings.Split(string(b), "```")[1:] {
		if i%2 == 0 { // inside a fence
			checkNames(t, docs, "docs/metrics.md example", block)
		}
	}
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
	// Templating variables: their query is a string or an object.
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	SchemaVersion int `json:"schemaVersion"`
}

type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // collapsed rows
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
}

func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Fatal("deploy/grafana/tidecache.json is not valid JSON")
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 || len(d.Panels) == 0 {
		t.Fatalf("dashboard lacks title, uid, schemaVersion or panels: %q %q %d %d", d.Title, d.UID, d.SchemaVersion, len(d.Panels))
	}
	docs := documented(t)
	ids := map[int]bool{}
	exprs := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: bad gridPos", p.Title)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("panel %q: target %q with empty expr or missing/duplicate refId", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
				if checkNames(t, docs, "panel "+p.Title, tg.Expr) == 0 {
					t.Errorf("panel %q: expr %q uses no tidecache metric", p.Title, tg.Expr)
				}
				exprs++
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	// No two panels of the top level share a cell of the grid.
	for i, a := range d.Panels {
		for _, b := range d.Panels[i+1:] {
			if a.GridPos != nil && b.GridPos != nil && overlap(*a.GridPos, *b.GridPos) {
				t.Errorf("panels %q and %q overlap", a.Title, b.Title)
			}
		}
	}
	for _, v := range d.Templating.List {
		checkNames(t, docs, "variable "+v.Name, string(v.Query))
	}
	if exprs == 0 {
		t.Error("no queries in the dashboard")
	}
}

// overlap reports whether two grid positions share a cell.
func overlap(a, b struct{ H, W, X, Y int }) bool {
	return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
}

// TestGrafanaDashboardShowsWriteCachePressure: an operator sees the write
// cache filling up before it is full: its fill, incoming against
// written-back blocks, the forecast, the writes that find it full, and the
// HDD array's latency and queue behind it.
func TestGrafanaDashboardShowsWriteCachePressure(t *testing.T) {
	var d dashboard
	if err := json.Unmarshal(mustRead(t, dashboardFile), &d); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				exprs = append(exprs, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	all := strings.Join(exprs, "\n")
	for _, name := range []string{
		"tidecache_volume_dirty_bytes", "tidecache_volume_cache_size_bytes",
		"tidecache_volume_writes_allocated_total", "tidecache_volume_written_back_blocks_total",
		"tidecache_volume_write_cache_time_to_full_seconds",
		"tidecache_volume_writes_around_total", "tidecache_volume_writes_blocked_total",
		"tidecache_volume_writeback_jobs",
		"tidecache_origin_read_time_seconds_total", "tidecache_origin_reads_completed_total",
		"tidecache_origin_write_time_seconds_total", "tidecache_origin_writes_completed_total",
		"tidecache_origin_ios_in_progress",
	} {
		if !regexp.MustCompile(`\b` + name + `\b`).MatchString(all) {
			t.Errorf("no panel shows %s", name)
		}
	}
}

func TestAlertRulesUseDocumentedMetrics(t *testing.T) {
	docs := documented(t)
	for _, f := range []string{rulesFile, rulesTestFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if checkNames(t, docs, f, string(b)) == 0 {
			t.Errorf("%s uses no tidecache metric", f)
		}
	}
	// Every alert is explained in the docs.
	b, _ := os.ReadFile(rulesFile)
	doc, _ := os.ReadFile(docsFile)
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\S+)`).FindAllStringSubmatch(string(b), -1) {
		if !strings.Contains(string(doc), "| "+m[1]+" |") {
			t.Errorf("alert %s is not explained in docs/metrics.md", m[1])
		}
	}
}

// promtool ships with Debian's prometheus package; without it these tests
// are skipped.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt package prometheus)")
	}
	return p
}

func TestPromtoolCheckMetrics(t *testing.T) {
	bin := promtool(t)
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition(t))
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestPromtoolRules(t *testing.T) {
	bin := promtool(t)
	rules, err := filepath.Glob(filepath.Join("..", "..", "deploy", "prometheus", "*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	rules = slices.DeleteFunc(rules, func(f string) bool { return strings.HasSuffix(f, ".test.yml") })
	if len(rules) == 0 {
		t.Fatal("no rule files")
	}
	if out, err := exec.Command(bin, append([]string{"check", "rules"}, rules...)...).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "test", "rules", rulesTestFile).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
