// SPDX-License-Identifier: Apache-2.0

package testbed

import (
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	c, err := Config{Name: "x"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.HDDs != 4 || c.HDD != Nearline7200() || c.SSDSize == 0 || c.Progress == nil {
		t.Errorf("defaults: %+v", c)
	}
	for name, bad := range map[string]Config{
		"no name":   {},
		"odd HDDs":  {Name: "x", HDDs: 5},
		"sub-ms":    {Name: "x", HDD: HDD{Latency: 1500 * time.Microsecond, IOPS: 1}},
		"two disks": {Name: "x", HDDs: 2},
		"queue 48":  {Name: "x", HDD: HDD{Latency: time.Millisecond, QueueDepth: 48}},
		"queue 2":   {Name: "x", HDD: HDD{Latency: time.Millisecond, QueueDepth: 2}},
		"bfq":       {Name: "x", HDD: HDD{Latency: time.Millisecond, Scheduler: "bfq"}},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestLockDir(t *testing.T) {
	dir := t.TempDir()
	a, b := &Bed{dir: dir}, &Bed{dir: dir}
	if err := a.lockDir(); err != nil {
		t.Fatal(err)
	}
	if err := b.lockDir(); err == nil || !strings.Contains(err.Error(), "in use by another run") {
		t.Errorf("second lock: %v, want an in-use error", err)
	}
	a.unlockDir()
	if err := b.lockDir(); err != nil {
		t.Errorf("lock after unlock: %v", err)
	}
	b.unlockDir()
}

func TestHDDDefaults(t *testing.T) {
	h := Nearline7200()
	if h.QueueDepth != 32 || h.Scheduler != SchedDeadline {
		t.Errorf("Nearline7200 queues %d commands under %q, want 32 (NCQ) under mq-deadline", h.QueueDepth, h.Scheduler)
	}
	c, err := Config{Name: "x", HDD: HDD{Latency: 8 * time.Millisecond, IOPS: 150}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.HDD.QueueDepth != 32 || c.HDD.Scheduler != SchedDeadline {
		t.Errorf("an HDD without queue settings: %+v, want 32 commands under mq-deadline", c.HDD)
	}
	c, err = Config{Name: "x", HDD: HDD{Latency: 8 * time.Millisecond, QueueDepth: 64, Scheduler: SchedNone}}.withDefaults()
	if err != nil || c.HDD.QueueDepth != 64 || c.HDD.Scheduler != SchedNone {
		t.Errorf("explicit queue settings: %+v, %v", c.HDD, err)
	}
	for _, want := range []string{"one queue of 32 commands", "scheduler mq-deadline", "throttling.iops-total=150"} {
		if !strings.Contains(h.String(), want) {
			t.Errorf("%q lacks %q", h.String(), want)
		}
	}
}

func TestParseQueueInfo(t *testing.T) {
	q, err := parseQueueInfo("[mq-deadline] none\n1\n32\n64\n126\n1280\n")
	if err != nil {
		t.Fatal(err)
	}
	if q != (QueueInfo{Scheduler: "mq-deadline", HWQueues: 1, Tags: 32, NrRequests: 64, MaxSegments: 126, MaxKiB: 1280}) {
		t.Errorf("parsed %+v", q)
	}
	for _, bad := range []string{"mq-deadline none\n1\n32\n64\n126\n1280", "[none] mq-deadline\n1\n32\n64\n126", "[none]\n1\nx\n64\n126\n1280"} {
		if _, err := parseQueueInfo(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
