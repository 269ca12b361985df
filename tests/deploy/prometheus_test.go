// SPDX-License-Identifier: Apache-2.0

package deploy_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tidecache/tidecache/pkg/daemon"
)

const (
	rulesFile   = "../../deploy/prometheus/tidecache-alerts.yml"
	scrapeDir   = "../../deploy/prometheus/scrape"
	runbookFile = "../../docs/runbook.md"
	metricsDoc  = "../../docs/metrics.md"
	// runbookURL is how every alert's runbook_url starts; the anchor
	// follows the '#'.
	runbookURL = "https://github.com/tidecache/tidecache/blob/main/docs/runbook.md#"
)

// metricsPort is the port tidecached serves /metrics on by default.
func metricsPort(t *testing.T) string {
	t.Helper()
	_, port, err := net.SplitHostPort(daemon.Default().Listen)
	if err != nil {
		t.Fatalf("daemon.Default().Listen: %v", err)
	}
	return port
}

// targetRE matches a host:port scrape target in a YAML flow list.
var targetRE = regexp.MustCompile(`"([A-Za-z0-9.-]+):([0-9]+)"`)

// TestPrometheusScrapeConfigs runs `promtool check config` on the shipped
// scrape configurations (which also checks the rules they load and the
// file_sd targets files), and checks that they, and the snippet in
// docs/metrics.md, scrape the daemon's default port under the job name the
// alert rules select.
func TestPrometheusScrapeConfigs(t *testing.T) {
	port := metricsPort(t)
	configs, err := filepath.Glob(filepath.Join(scrapeDir, "prometheus-*.yml"))
	if err != nil || len(configs) < 2 {
		t.Fatalf("want the static and file_sd configurations in %s, got %v (%v)", scrapeDir, configs, err)
	}
	targetFiles, _ := filepath.Glob(filepath.Join(scrapeDir, "targets", "*.yml"))
	if len(targetFiles) == 0 {
		t.Fatalf("no example targets file in %s/targets", scrapeDir)
	}
	kinds := map[string]bool{}
	for _, f := range configs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			ScrapeConfigs []struct {
				JobName       string           `json:"job_name"`
				StaticConfigs []map[string]any `json:"static_configs"`
				FileSDConfigs []map[string]any `json:"file_sd_configs"`
			} `json:"scrape_configs"`
		}
		if err := yaml.Unmarshal(b, &cfg); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(cfg.ScrapeConfigs) != 1 || cfg.ScrapeConfigs[0].JobName != "tidecache" {
			t.Errorf("%s: want one scrape job named tidecache (the alert rules select up{job=\"tidecache\"})", f)
			continue
		}
		sc := cfg.ScrapeConfigs[0]
		if len(sc.StaticConfigs) > 0 {
			kinds["static"] = true
		}
		if len(sc.FileSDConfigs) > 0 {
			kinds["file_sd"] = true
		}
	}
	if !kinds["static"] || !kinds["file_sd"] {
		t.Errorf("want a static and a file_sd configuration, got %v", kinds)
	}
	for _, f := range append(append([]string{metricsDoc}, configs...), targetFiles...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range targetRE.FindAllStringSubmatch(string(b), -1) {
			n++
			if m[2] != port {
				t.Errorf("%s: target %s:%s, but tidecached listens on %s", f, m[1], m[2], port)
			}
		}
		if n == 0 && !strings.Contains(f, "file-sd") {
			t.Errorf("%s: no scrape target found", f)
		}
	}

	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt package prometheus)")
	}
	for _, f := range configs {
		// Relative paths in the file (rule_files, file_sd) are resolved
		// against its directory, wherever promtool runs.
		if out, err := exec.Command(bin, "check", "config", f).CombinedOutput(); err != nil {
			t.Errorf("promtool check config %s: %v\n%s", f, err, out)
		}
	}
}

// TestAlertRunbookURLs checks that every alert has a runbook_url pointing
// to a section of docs/runbook.md that exists.
func TestAlertRunbookURLs(t *testing.T) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	anchors := runbookAnchors(t)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			u := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(u, runbookURL)
			switch {
			case u == "":
				t.Errorf("alert %s has no runbook_url", r.Alert)
			case !ok:
				t.Errorf("alert %s: runbook_url %q does not start with %s", r.Alert, u, runbookURL)
			case !anchors[anchor]:
				t.Errorf("alert %s: runbook_url anchor #%s is not a heading of docs/runbook.md", r.Alert, anchor)
			}
		}
	}
	if n == 0 {
		t.Fatal("no alerts found")
	}
	// The runbook's own links between its sections resolve too.
	rb, _ := os.ReadFile(runbookFile)
	for _, m := range regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(string(rb), -1) {
		if !anchors[m[1]] {
			t.Errorf("docs/runbook.md links to #%s, which is no heading", m[1])
		}
	}
}

// runbookAnchors returns the anchors GitHub generates for the headings of
// docs/runbook.md: lower case, spaces to '-', punctuation other than '-'
// and '_' dropped.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		out[slug(strings.TrimLeft(line, "#"))] = true
	}
	return out
}

func slug(heading string) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			sb.WriteRune(r)
		case r == ' ':
			sb.WriteRune('-')
		}
	}
	return sb.String()
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		" TidecacheNoLeader":                                "tidecachenoleader",
		" `pool create` refuses a device":                   "pool-create-refuses-a-device",
		" An SSD reports I/O errors (volume state `error`)": "an-ssd-reports-io-errors-volume-state-error",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
