// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dm_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/tidecache/tidecache/pkg/dm"
)

// Example puts a dm-writecache in front of an origin device, reads its
// dirty block count, and drains and removes it. It needs root and a kernel
// with dm-writecache, so it is compiled but not run by go test.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, err := dm.Open()
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	const name = "tc-example"
	wc := dm.WritecacheParams{
		Mode: dm.WritecacheSSD, Origin: "/dev/md0", Cache: "/dev/nvme0n1p3", BlockSize: 4096,
	}
	if err := wc.Validate(); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Create(ctx, name, "TIDECACHE-example"); errors.Is(err, dm.ErrExists) {
		log.Fatalf("%s already exists", name)
	} else if err != nil {
		log.Fatal(err)
	}
	if err := c.Load(ctx, name, dm.Table{wc.Target(0, 2097152)}); err != nil {
		log.Fatal(err)
	}
	if err := c.Resume(ctx, name); err != nil { // creates /dev/mapper/tc-example
		log.Fatal(err)
	}

	// The status format depends on the target version.
	ver, err := c.TargetVersion(ctx, "writecache")
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.Status(ctx, name)
	if err != nil {
		log.Fatal(err)
	}
	s, err := dm.ParseWritecacheStatus(st[0].Params, ver)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d of %d blocks dirty\n", dm.DevicePath(name), s.DirtyBlocks(), s.TotalBlocks)

	// Write every dirty block back to the origin (the message waits for
	// it), then remove the device.
	if _, err := c.Message(ctx, name, 0, "flush"); err != nil {
		log.Fatal(err)
	}
	if err := c.Remove(ctx, name); errors.Is(err, dm.ErrBusy) {
		log.Fatalf("%s is still open", name)
	} else if err != nil {
		log.Fatal(err)
	}
}
