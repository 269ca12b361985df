// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dmtest_test

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/tidecache/tidecache/pkg/dm"
	"github.com/tidecache/tidecache/pkg/dm/dmtest"
)

// A write cache that reports fewer dirty blocks on every status read, and
// a resume that fails once.
func Example() {
	ctx := context.Background()
	k := dmtest.New()
	k.AddDevice("tc-db-wtier", "TIDECACHE-wtier-1", dm.Table{
		dm.WritecacheParams{Origin: "253:1", Cache: "253:2", BlockSize: 4096}.Target(0, 2048)})
	k.SetStatusFunc("tc-db-wtier", func(q dmtest.StatusQuery) (string, error) {
		dirty := max(30-10*q.N, 0)
		return fmt.Sprintf("0 1000 %d 0 0 0 0 0 0 0 0 0 0 0", 1000-dirty), nil
	})
	k.Fail(dmtest.Failure{Op: dmtest.OpResume, Device: "tc-db-wtier", Errno: unix.EIO})

	c := dm.NewClient(k, "") // no device nodes
	defer c.Close()
	for range 3 {
		st, _ := c.Status(ctx, "tc-db-wtier")
		wc, _ := dm.ParseWritecacheStatus(st[0].Params, dm.Version{Major: 1, Minor: 6})
		fmt.Println("dirty", wc.DirtyBlocks())
	}
	err := c.Resume(ctx, "tc-db-wtier")
	fmt.Println(err, errors.Is(err, unix.EIO))
	fmt.Println(c.Resume(ctx, "tc-db-wtier"))
	// Output:
	// dirty 20
	// dirty 10
	// dirty 0
	// dm resume tc-db-wtier: input/output error true
	// <nil>
}
