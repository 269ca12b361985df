// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/pkg/command"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseNVMeSmartLog(t *testing.T) {
	for _, tc := range []struct {
		file string
		want SSDHealth
	}{
		{"nvme-cli-2.3-smart-log.json", SSDHealth{WearPercent: intp(0)}},
		{"nvme-cli-2.3-smart-log-worn.json", SSDHealth{WearPercent: intp(97), MediaErrors: 12, ErrorLogEntries: 40, CriticalWarning: true}},
		{"nvme-cli-1.x-smart-log.json", SSDHealth{WearPercent: intp(3), ErrorLogEntries: 2}},
	} {
		got, err := ParseNVMeSmartLog(fixture(t, tc.file))
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v (wear %v)\nwant %+v (wear %v)", tc.file, got, deref(got.WearPercent), tc.want, deref(tc.want.WearPercent))
		}
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestParseNVMeSmartLogVariants(t *testing.T) {
	for _, tc := range []struct {
		in       string
		wear     any
		media    uint64
		critical bool
	}{
		// nvme-cli -H / verbose: the critical warning is an object.
		{`{"critical_warning":{"value":1,"available_spare":1},"percent_used":5,"media_errors":"3","num_err_log_entries":"0"}`, 5, 3, true},
		// Newer spellings, a counter beyond 64 bits, a 1.x long double.
		{`{"critical_warning":0,"percentage_used":120,"media_errors":"340282366920938463463374607431768211455"}`, 120, 1<<64 - 1, false},
		{`{"critical_warning":0,"media_errors":1.2e+3}`, nil, 1200, false},
	} {
		h, err := ParseNVMeSmartLog([]byte(tc.in))
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if deref(h.WearPercent) != tc.wear || h.MediaErrors != tc.media || h.CriticalWarning != tc.critical {
			t.Errorf("%s: got %+v wear %v", tc.in, h, deref(h.WearPercent))
		}
	}
	for _, bad := range []string{``, `{}`, `{"critical_warning":"x"}`, `{"critical_warning":0,"media_errors":-1}`, `[1]`} {
		if _, err := ParseNVMeSmartLog([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseNVMeIDCtrl(t *testing.T) {
	model, serial, err := ParseNVMeIDCtrl(fixture(t, "nvme-cli-2.3-id-ctrl.json"))
	if err != nil || model != "QEMU NVMe Ctrl" || serial != "TIDE0001" {
		t.Errorf("got %q %q %v", model, serial, err)
	}
	if _, _, err := ParseNVMeIDCtrl([]byte(`{"vid":1}`)); err == nil {
		t.Error("no mn/sn: no error")
	}
}

func TestParseSmartctl(t *testing.T) {
	for _, tc := range []struct {
		file string
		want SSDHealth
	}{
		{"smartctl-7.3-nvme.json", SSDHealth{Model: "QEMU NVMe Ctrl", Serial: "TIDE0001", WearPercent: intp(0)}},
		{"smartctl-7.3-sata.json", SSDHealth{Model: "TIDESATA", Serial: "SATA0001"}},
		{"smartctl-7.3-sata-failing.json", SSDHealth{Model: "TIDESATA", Serial: "SATA0001",
			WearPercent: intp(85), MediaErrors: 7, ErrorLogEntries: 3, CriticalWarning: true}},
	} {
		got, err := ParseSmartctl(fixture(t, tc.file))
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v (wear %v)\nwant %+v (wear %v)", tc.file, got, deref(got.WearPercent), tc.want, deref(tc.want.WearPercent))
		}
	}
	_, err := ParseSmartctl(fixture(t, "smartctl-7.3-unknown-device.json"))
	if !errors.Is(err, errUnsupported) || !strings.Contains(err.Error(), "Unable to detect device type") {
		t.Errorf("unknown device: %v", err)
	}
	_, err = ParseSmartctl([]byte(`{"smartctl":{"exit_status":2,"messages":[{"string":"/dev/sdz: No such device"}]}}`))
	if err == nil || errors.Is(err, errUnsupported) || !strings.Contains(err.Error(), "No such device") {
		t.Errorf("open failed: %v", err)
	}
	if _, err := ParseSmartctl([]byte(`{"model_name":"x"}`)); err == nil {
		t.Error("not smartctl output: no error")
	}
}

// fakeRunner answers command lines from a table; a missing program is
// reported like command.Runner does.
type fakeRunner struct {
	out     map[string][]byte
	err     map[string]error
	missing map[string]bool
	ran     []string
}

func (f *fakeRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	line := command.FormatCommand(name, args...)
	f.ran = append(f.ran, line)
	if f.missing[name] {
		return nil, fmt.Errorf("%s %w: install it", name, command.ErrNotFound)
	}
	if err, ok := f.err[line]; ok {
		return f.out[line], err
	}
	out, ok := f.out[line]
	if !ok {
		return nil, &command.ExitError{Cmd: line, Code: 1, Stderr: "unexpected command in test"}
	}
	return out, nil
}

func TestSmartSource(t *testing.T) {
	ctx := context.Background()
	devices := func(context.Context) ([]string, error) {
		return []string{"/dev/nvme0n1", "/dev/sda", "/dev/vda", "/dev/nvme1n1"}, nil
	}
	r := &fakeRunner{
		out: map[string][]byte{
			"nvme smart-log -o json /dev/nvme0n1": fixture(t, "nvme-cli-2.3-smart-log-worn.json"),
			"nvme id-ctrl -o json /dev/nvme0n1":   fixture(t, "nvme-cli-2.3-id-ctrl.json"),
			"smartctl --json -a /dev/sda":         fixture(t, "smartctl-7.3-sata-failing.json"),
			"smartctl --json -a /dev/vda":         fixture(t, "smartctl-7.3-unknown-device.json"),
			"nvme smart-log -o json /dev/nvme1n1": nil,
		},
		err: map[string]error{
			// smartctl reports the failing disk in its exit status.
			"smartctl --json -a /dev/sda": &command.ExitError{Cmd: "smartctl --json -a /dev/sda", Code: 24},
			"smartctl --json -a /dev/vda": &command.ExitError{Cmd: "smartctl --json -a /dev/vda", Code: 1},
			"nvme smart-log -o json /dev/nvme1n1": &command.ExitError{Cmd: "nvme smart-log -o json /dev/nvme1n1", Code: 1,
				Stderr: "smart log: Input/output error"},
		},
	}
	src := &SmartSource{Runner: r, Devices: devices}
	got, err := src.SSDs(ctx)
	want := []SSDHealth{
		{Path: "/dev/nvme0n1", Model: "QEMU NVMe Ctrl", Serial: "TIDE0001", WearPercent: intp(97),
			MediaErrors: 12, ErrorLogEntries: 40, CriticalWarning: true},
		{Path: "/dev/sda", Model: "TIDESATA", Serial: "SATA0001", WearPercent: intp(85),
			MediaErrors: 7, ErrorLogEntries: 3, CriticalWarning: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SSDs =\n%+v\nwant\n%+v", got, want)
	}
	// /dev/vda (not a device smartctl knows) is left out silently;
	// /dev/nvme1n1 failed and is named.
	if err == nil || !strings.Contains(err.Error(), "/dev/nvme1n1") || strings.Contains(err.Error(), "/dev/vda") {
		t.Errorf("err = %v", err)
	}

	// nvme-cli missing: smartctl reads the NVMe device. Both missing: the
	// feature is absent, which is no error.
	r2 := &fakeRunner{
		out:     map[string][]byte{"smartctl --json -a /dev/nvme0n1": fixture(t, "smartctl-7.3-nvme.json")},
		missing: map[string]bool{"nvme": true},
	}
	src = &SmartSource{Runner: r2, Devices: func(context.Context) ([]string, error) { return []string{"/dev/nvme0n1"}, nil }, MaxAge: -1}
	if got, err := src.SSDs(ctx); err != nil || len(got) != 1 || got[0].Serial != "TIDE0001" || got[0].Path != "/dev/nvme0n1" {
		t.Errorf("smartctl fallback: %+v, %v", got, err)
	}
	r2.missing["smartctl"] = true
	if got, err := src.SSDs(ctx); err != nil || len(got) != 0 {
		t.Errorf("no tools: %+v, %v; want nothing and no error", got, err)
	}

	if got, err := (&SmartSource{}).SSDs(ctx); err != nil || got != nil {
		t.Errorf("no devices: %v, %v", got, err)
	}
	fail := &SmartSource{Runner: r, Devices: func(context.Context) ([]string, error) { return nil, errors.New("no pools") }}
	if _, err := fail.SSDs(ctx); err == nil || !strings.Contains(err.Error(), "no pools") {
		t.Errorf("device list fails: %v", err)
	}
}

// TestSmartSourceMaxAge: a device's health is read once per MaxAge, its
// failure too; scrapes and inventory rounds in between are answered from
// that reading, so no caller can make the node run a tool per SSD at will.
func TestSmartSourceMaxAge(t *testing.T) {
	ctx := context.Background()
	r := &fakeRunner{
		out: map[string][]byte{
			"nvme smart-log -o json /dev/nvme0n1": fixture(t, "nvme-cli-2.3-smart-log-worn.json"),
			"nvme id-ctrl -o json /dev/nvme0n1":   fixture(t, "nvme-cli-2.3-id-ctrl.json"),
		},
		err: map[string]error{"nvme smart-log -o json /dev/nvme1n1": &command.ExitError{Cmd: "nvme smart-log", Code: 1}},
	}
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	devs := []string{"/dev/nvme0n1", "/dev/nvme1n1"}
	src := &SmartSource{Runner: r, Devices: func(context.Context) ([]string, error) { return devs, nil }, Now: func() time.Time { return now }}
	read := func() ([]SSDHealth, error) {
		t.Helper()
		return src.SSDs(ctx)
	}
	first, err1 := read()
	ran := len(r.ran)
	if len(first) != 1 || err1 == nil || ran != 3 {
		t.Fatalf("first reading: %d SSDs, err %v, %d commands; want 1, the failure of nvme1n1, 3", len(first), err1, ran)
	}
	for range 100 { // scrapes within MaxAge
		now = now.Add(2 * time.Second)
		got, err := read()
		if !reflect.DeepEqual(got, first) || err == nil {
			t.Fatalf("cached reading %+v, %v; want the first", got, err)
		}
	}
	if len(r.ran) != ran {
		t.Fatalf("%d commands ran within MaxAge (%v), want none", len(r.ran)-ran, DefaultSmartMaxAge)
	}
	now = now.Add(DefaultSmartMaxAge)
	if _, err := read(); err == nil || len(r.ran) != 2*ran {
		t.Fatalf("after MaxAge: %d commands, want %d", len(r.ran)-ran, ran)
	}
	// An SSD that left the pools is forgotten.
	devs = devs[:1]
	read()
	if _, ok := src.last["/dev/nvme1n1"]; ok {
		t.Error("reading of an SSD no longer listed kept")
	}
}
