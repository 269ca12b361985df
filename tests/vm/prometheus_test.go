// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// promQuery runs an instant query against the guest's Prometheus and
// returns the single sample's value, or ok=false when there is none.
func (n *node) promQuery(q string) (float64, bool) {
	n.t.Helper()
	out := n.mustSh("curl -sf 'http://127.0.0.1:9090/api/v1/query?query=" + url.QueryEscape(q) + "'")
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Status != "success" {
		n.t.Fatalf("query %s: %v\n%s", q, err, out)
	}
	if len(r.Data.Result) != 1 {
		return 0, false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// TestPrometheusScrape runs a real Prometheus (Debian's package) next to the
// daemon in the guest and checks that the queries for dirty blocks and the
// write tier's read hit ratio return what the kernel's dm-writecache status
// says.
func TestPrometheusScrape(t *testing.T) {
	besideAnother(t, 20*time.Second)
	n := bootNode(t, smallNode)
	n.createPool("tank")
	n.mustTidectl("volume create db --size 128M --write-cache 64M")
	n.startDaemon("--embedded-etcd --etcd-data-dir /run/etcd")
	n.mustSh(`cat > /run/prom.yml <<'EOF'
global:
  scrape_interval: 2s
  scrape_timeout: 2s
scrape_configs:
  - job_name: tidecache
    static_configs:
      - targets: ['127.0.0.1:9540']
EOF
prometheus --config.file=/run/prom.yml --storage.tsdb.path=/run/prom --web.listen-address=127.0.0.1:9090 >/run/prom.log 2>&1 &`)
	n.eventually(90*time.Second, "curl -sf http://127.0.0.1:9090/-/ready", "Ready")

	// Dirty data, and reads that hit the write cache.
	n.fio(fioJob("/dev/mapper/tc-db", "prom", "randwrite", "0", "8M") + " --do_verify=1")
	n.mustSh("dd if=/dev/mapper/tc-db of=/dev/null bs=4k count=512 iflag=direct 2>/dev/null")
	// ...and reads of blocks never written, which miss it.
	n.mustSh("dd if=/dev/mapper/tc-db of=/dev/null bs=4k count=1000 skip=16384 iflag=direct 2>/dev/null")

	// The kernel's own numbers: dm-writecache status fields 2,3 (total,
	// free blocks) and 5,6 (reads, read hits), via dmsetup, not tidecache.
	f := strings.Fields(n.mustSh("dmsetup status tc-db-wtier"))
	if len(f) < 3+14 || f[2] != "writecache" {
		t.Fatalf("unexpected status: %v", f)
	}
	num := func(i int) float64 { v, _ := strconv.ParseFloat(f[3+i], 64); return v }
	dirty := num(1) - num(2)
	hitRatio := num(5) / num(4)
	if dirty == 0 || num(5) == 0 || hitRatio >= 1 {
		t.Fatalf("test set-up produced no dirty blocks or read hits: %v", f)
	}

	deadline := time.Now().Add(60 * time.Second)
	for {
		gotDirty, ok1 := n.promQuery(`tidecache_volume_dirty_blocks{volume="db"}`)
		gotRatio, ok2 := n.promQuery(`tidecache_volume_read_hit_ratio{volume="db",tier="write"}`)
		if ok1 && ok2 && gotDirty == dirty && math.Abs(gotRatio-hitRatio) < 1e-9 {
			t.Logf("Prometheus: dirty blocks %v, write-tier read hit ratio %.4f; kernel: %v, %.4f", gotDirty, gotRatio, dirty, hitRatio)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus says dirty=%v (found %v) ratio=%v (found %v); kernel says %v, %v\ntargets: %s\nprometheus log:\n%s",
				gotDirty, ok1, gotRatio, ok2, dirty, hitRatio,
				n.sh("curl -s http://127.0.0.1:9090/api/v1/targets").Stdout, n.sh("tail -20 /run/prom.log").Stdout)
		}
		time.Sleep(time.Second)
	}
	// A rate over the scraped counters works too (the series are counters).
	// rate() needs two samples in its window, and the loop above may have
	// matched on the very first scrape, so wait for the second one.
	rateQuery := fmt.Sprintf(`rate(tidecache_volume_writes_total{volume="db"}[%ds])`, 30)
	deadline = time.Now().Add(30 * time.Second)
	for {
		if _, ok := n.promQuery(rateQuery); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no rate() over tidecache_volume_writes_total after 30s; samples in the last 30s: %s",
				n.sh("curl -s 'http://127.0.0.1:9090/api/v1/query?query="+url.QueryEscape(`count_over_time(tidecache_volume_writes_total{volume="db"}[30s])`)+"'").Stdout)
		}
		time.Sleep(time.Second)
	}
}
