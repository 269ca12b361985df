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
