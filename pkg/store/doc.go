// SPDX-License-Identifier: Apache-2.0

// Package store is tidecache's cluster state in etcd. It is the only
// package that imports the etcd client, and it owns everything about the
// keys under the cluster's prefix: their layout, the versioned JSON records
// in them, validation, the transactions that write them, node membership
// (leases), leader election and watches. docs/etcd-schema.md is the
// contract it keeps.
//
// # Records
//
// Desired state is written by users (through tidectl): VolumeSpec,
// NodeSpec, Policy. Observed state is written by daemons: VolumeStatus by
// the node owning the volume, Node by each node under its lease. The two
// never share a key, so a daemon's status update cannot race a user's edit.
// The record types and their Validate live in package api, which has no
// etcd in it; this package stores them. Each record is stored as
// {"apiVersion","kind","spec"|"status"} JSON and validated (its api
// Validate) before every write and after every read.
//
// # Revisions and transactions
//
// Every write is one etcd transaction with a revision check. Reads return
// a Meta; pass its ModRevision back to change or delete the record:
//
//	spec, meta, err := s.GetVolumeSpec(ctx, "db")
//	spec.Mode = "writethrough"
//	_, err = s.UpdateVolumeSpec(ctx, spec, meta.ModRevision)
//	if errors.Is(err, store.ErrConflict) {
//		// someone else changed it since the read: read again, decide again
//	}
//
// Creates (CreateVolumeSpec, Put* with expectModRevision 0) fail with
// ErrConflict when the record exists; there is no blind upsert.
//
// # Lists, watches and invalid records
//
// List* return the valid records, the store revision the list reflects,
// and the invalid ones apart ([]InvalidRecord). Watch(ctx, rev+1) then
// streams every later change of every record under the prefix. A watch
// whose revision was compacted ends with ErrCompacted: list again. Records
// that are not JSON, have an unknown apiVersion, the wrong kind or name for
// their key, or fail validation are reported and skipped, never fatal.
//
// # Lifetimes: who closes, who cancels
//
//   - Open does not wait for etcd, so a daemon starts (and its volumes keep
//     running) while etcd is down. The caller Closes the Store last.
//   - Every request is bounded by Config.RequestTimeout and by its ctx.
//   - Watch runs until its ctx is cancelled (the caller's way to stop it),
//     the Store is closed, or it delivers a result with Err; its channel is
//     then closed. Read it until it closes.
//   - Register's lease outlives Register's ctx: keep-alives run in the
//     background until Registration.Close (which revokes the lease) or
//     until the lease is lost (Lost closes). Likewise Campaign's lease until
//     Leadership.Resign or loss (Done closes). Closing the Store without
//     them leaves their leases to expire after the TTL.
//   - Campaign blocks until the node leads or its ctx ends.
//
// # Errors callers must expect
//
// Test with errors.Is:
//
//   - ErrNotFound: no such record (Get*, updates and deletes of a record
//     that was deleted, PutVolumeStatus without a spec); Leader when no node
//     leads.
//   - ErrConflict: a revision check failed (create of an existing record,
//     update or delete after someone else's change). Not transient: re-read.
//   - ErrNotOwner: PutVolumeStatus by a node the spec does not name.
//   - ErrInvalidRecord: Get* of an unusable value; the error is an
//     InvalidRecord with the key and the cause.
//   - ErrCompacted: in WatchResult.Err.
//   - ErrLeaseLost: Registration.Update after the lease expired or another
//     registration took the record over; Campaign when its lease died.
//   - ErrUnavailable: etcd could not be reached, had no leader, or did not
//     answer within RequestTimeout. Nothing was written (or, for a request
//     that timed out after reaching etcd, maybe it was: re-read before
//     acting). The kernel tables are untouched; report the outage, retry.
//   - context.Canceled when the caller's ctx was cancelled.
//
// Validation failures of a record being written (bad name, mode, sizes)
// are plain errors naming every problem, wrapping the pool package's
// sentinels where they come from there (pool.ErrInvalidName,
// pool.ErrInvalidMode).
package store
