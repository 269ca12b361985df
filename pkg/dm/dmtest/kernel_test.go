// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dmtest_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/dm/dmtest"
)

var linear = dm.Table{dm.LinearParams{Device: "8:16"}.Target(0, 2048)}

func TestFailure(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		f      dmtest.Failure
		failed []bool // outcome of four resumes of dev "a"
	}{
		{"next", dmtest.Failure{Op: dmtest.OpResume, Errno: unix.EIO}, []bool{true, false, false, false}},
		{"second", dmtest.Failure{Op: dmtest.OpResume, Nth: 2, Errno: unix.EIO}, []bool{false, true, false, false}},
		{"twice", dmtest.Failure{Op: dmtest.OpResume, Nth: 2, Times: 2, Errno: unix.EIO}, []bool{false, true, true, false}},
		{"always", dmtest.Failure{Op: dmtest.OpResume, Nth: 3, Times: -1, Errno: unix.EIO}, []bool{false, false, true, true}},
		{"other device", dmtest.Failure{Op: dmtest.OpResume, Device: "b", Errno: unix.EIO}, []bool{false, false, false, false}},
		{"other op", dmtest.Failure{Op: dmtest.OpSuspend, Errno: unix.EIO}, []bool{false, false, false, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := dmtest.New()
			k.AddDevice("a", "UUID-a", linear)
			cl := k.Client(t)
			k.Fail(c.f)
			var got []bool
			for range 4 {
				err := cl.Resume(ctx, "a")
				if err != nil && !errors.Is(err, unix.EIO) {
					t.Fatalf("Resume: %v", err)
				}
				got = append(got, err != nil)
			}
			if !reflect.DeepEqual(got, c.failed) {
				t.Errorf("failed %v, want %v", got, c.failed)
			}
			if n := len(k.CallsOf("a", dmtest.OpResume)); n != 4 {
				t.Errorf("%d resume calls recorded, want 4", n)
			}
		})
	}
}

func TestFailedCallHasNoEffect(t *testing.T) {
	ctx := context.Background()
	k := dmtest.New()
	k.AddDevice("a", "UUID-a", linear)
	cl := k.Client(t)
	k.Fail(dmtest.Failure{Op: dmtest.OpLoad, Device: "a", Errno: unix.EINVAL})
	next := dm.Table{dm.LinearParams{Device: "8:32"}.Target(0, 2048)}
	if err := cl.Load(ctx, "a", next); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("Load = %v, want EINVAL", err)
	}
	if d, _ := k.Device("a"); d.Inactive != nil || !reflect.DeepEqual(d.Live, linear) {
		t.Errorf("after a failed load: %+v", d)
	}
	if err := cl.Load(ctx, "a", dm.Table{{Start: 0, Length: 8, Type: "nosuch"}}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("Load of an unknown target type = %v, want EINVAL", err)
	}
}

func TestStatusFunc(t *testing.T) {
	ctx := context.Background()
	k := dmtest.New()
	k.AddDevice("wc", "UUID-wc", dm.Table{{Start: 0, Length: 2048, Type: "writecache", Params: "s 8:16 8:32 4096 0"}})
	cl := k.Client(t)
	k.SetStatusFunc("wc", func(q dmtest.StatusQuery) (string, error) {
		if q.N == 3 {
			return "", unix.EIO
		}
		return fmt.Sprintf("n=%d msgs=%d", q.N, len(q.Messages)), nil
	})
	read := func() (string, error) {
		st, err := cl.Status(ctx, "wc")
		if err != nil {
			return "", err
		}
		return st[0].Params, nil
	}
	if s, err := read(); s != "n=1 msgs=0" || err != nil {
		t.Errorf("first status %q, %v", s, err)
	}
	if _, err := cl.Message(ctx, "wc", 0, "flush"); err != nil {
		t.Fatal(err)
	}
	if s, err := read(); s != "n=2 msgs=1" || err != nil {
		t.Errorf("second status %q, %v", s, err)
	}
	if _, err := read(); !errors.Is(err, unix.EIO) {
		t.Errorf("third status: %v, want EIO", err)
	}
	// Table reads are not status reads.
	if tbl, err := cl.Table(ctx, "wc"); err != nil || tbl[0].Params != "s 8:16 8:32 4096 0" {
		t.Errorf("Table = %v, %v", tbl, err)
	}
	if s, _ := read(); s != "n=4 msgs=1" {
		t.Errorf("fourth status %q", s)
	}
}
