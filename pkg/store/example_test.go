// SPDX-License-Identifier: Apache-2.0

package store_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/etcdserver"
	"github.com/tidecache/tidecache/pkg/store"
)

// Example runs what tidectl and a node's daemon do on a one-machine
// cluster: an embedded etcd, a volume spec created by a user, the daemon
// listing and watching, and a user's edit that lost a race.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	dir, err := os.MkdirTemp("", "tidecache-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := etcdserver.Start(ctx, etcdserver.Config{
		DataDir: filepath.Join(dir, "etcd"), ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close() // after the store: deferred calls run last-in first-out

	cfg := store.DefaultConfig()
	cfg.Endpoints = srv.Endpoints()
	s, err := store.Open(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	// The daemon: list, then watch from the list's revision + 1.
	_, rev, _, err := s.ListVolumeSpecs(ctx)
	if err != nil {
		log.Fatal(err)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	events := s.Watch(wctx, rev+1)

	// A user creates a volume.
	meta, err := s.CreateVolumeSpec(ctx, api.VolumeSpec{
		Name: "db", Node: "node1", SizeBytes: 100 << 30, WriteCacheBytes: 10 << 30, Mode: "writeback",
	})
	if err != nil {
		log.Fatal(err)
	}
	r := <-events
	if r.Err != nil { // errors.Is(r.Err, store.ErrCompacted): list again
		log.Fatal(r.Err)
	}
	for _, e := range r.Events {
		fmt.Println(e.Type, e.Kind, e.Name, e.Value.(api.VolumeSpec).Mode)
	}

	// The owning node reports what it built for that revision of the spec.
	err = s.PutVolumeStatus(ctx, api.VolumeStatus{
		Name: "db", Node: "node1", ObservedRevision: meta.ModRevision, Mode: "writeback", State: "ready",
	})
	if err != nil {
		log.Fatal(err)
	}

	// Two users edit the spec from the same read; the second loses.
	spec, meta, err := s.GetVolumeSpec(ctx, "db")
	if err != nil {
		log.Fatal(err)
	}
	spec.Mode = "writethrough"
	if _, err := s.UpdateVolumeSpec(ctx, spec, meta.ModRevision); err != nil {
		log.Fatal(err)
	}
	spec.Mode = "passthrough"
	_, err = s.UpdateVolumeSpec(ctx, spec, meta.ModRevision)
	fmt.Println("second edit conflicts:", errors.Is(err, store.ErrConflict))

	// Output:
	// Put VolumeSpec db writeback
	// second edit conflicts: true
}
