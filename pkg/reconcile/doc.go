// SPDX-License-Identifier: Apache-2.0

// Package reconcile owns tidecached's control loop: it keeps this node's
// volumes as the cluster store's specs, policies and node spec ask, and
// writes each volume's observed status back. Decisions (which mode, which
// alert, whether to flush) are pkg/policy's; changes to the kernel go
// through the engine (the Engine interface, *engine.Engine in the daemon);
// the store is reached only through pkg/store (the Store interface).
//
// # The loop
//
// The controller is level-based, in the controller-runtime manner. Run
// lists every volume spec, policy and this node's spec, then watches the
// store from the listed revision + 1. Store events only say which volumes
// to look at; Reconcile reads the desired state from the store and the
// actual state from the engine every time, so a lost or repeated event
// costs at most a reconcile. A watch that fails (ErrCompacted, or any
// other error) is followed by a fresh list, with exponential backoff for
// errors other than compaction. Every ResyncInterval all volumes are
// reconciled against the kernel's tables anyway (drift, flush schedules,
// retries of terminal errors).
//
// Each volume has its own worker goroutine, started on demand. Requests
// for a volume coalesce while it is being reconciled, so at most one
// reconcile per volume is in flight and the next one reads the latest
// desired state; MaxConcurrent bounds how many volumes are reconciled at
// once. A transient error is retried with exponential backoff
// (MinBackoff..MaxBackoff); a terminal one (invalid spec or policy, no
// such pool, no space: see IsTerminal) is written to the status and not
// retried until the spec, a policy or the node spec changes, or the next
// resync.
//
// # One reconcile
//
// A pass runs in four steps (reconcileVolume): observe reads the desired
// state from the store and the actual state from one engine read
// (engine.Observe: the superblocks are scanned once per pass); decide
// turns them into a plan without I/O (tested on its own, decide_test.go);
// act carries the plan out through the engine; report writes the status.
// In order:
//
//  1. Read the spec. Another node's spec (or an unplaced one) is not
//     touched. A malformed spec is reported and the volume left as it is.
//  2. Read the effective policy (the spec's named policy over "default")
//     and the node's drain flag. A named policy that does not exist (or is
//     malformed) is a terminal error: acting without it could undo what it
//     asks.
//  3. Read the volume, its drift and its pool from the engine
//     (engine.Observe) and decide (policy.Decide) with the
//     observed facts: dm-writecache's error field and dirty blocks, the
//     health of the pool's SSDs (Config.SSDs), the time of the last flush.
//  4. Missing volume: create it from the spec in the decided mode.
//  5. Drift (found by engine.Observe, as engine.CheckVolume finds it):
//     with DriftPolicy "repair" the layout's tables are reloaded (engine.RepairVolume, which also brings
//     up devices that are missing); with "report" the status says so and
//     nothing else is changed until the drift is gone, since a mode change
//     starts from the stack the layout describes.
//  6. Apply the decided mode (engine.SetMode drains the write tier safely
//     first) and flush when the schedule says so.
//  7. Write the status: ObservedRevision is the spec's ModRevision, with
//     mode, state, dirty blocks, hit ratios, error and alerts. While a
//     drain or flush runs, the status is rewritten every ProgressInterval
//     with the blocks left (State api.StateDraining or api.StateFlushing).
//     A client waiting for a change waits for ObservedRevision to reach the
//     spec's revision with the wanted Mode and an empty Error.
//
// # Data safety
//
//   - A volume is deleted only when a user deleted its spec while this node
//     owned it (the controller saw the spec naming this node, in this run).
//     The engine refuses a dirty or open volume; the controller flushes a
//     dirty one and deletes it when clean, and retries an open one at each
//     resync. It never forces. The store deletes the status with the spec,
//     so a pending deletion is reported in the log and the error metric.
//   - A volume present on the node with no spec for this node (never
//     created through the store, its spec deleted while the daemon was
//     down, or its spec now naming another node) is reported (log once,
//     the tidecache_unmanaged_volumes gauge, Unmanaged) and never deleted.
//   - A spec that becomes malformed is not taken for a deletion.
//   - An SSD error latches the volume's safer mode until the spec is
//     written again (see pkg/policy). The latch is recorded in the status
//     (the critical alert) before the mode is switched, and restored from
//     it after a restart, because the evidence may be gone by then.
//
// # When the store is unreachable
//
// Every store request is bounded by StoreTimeout, and the store's health
// is checked every HealthInterval. While it fails, the controller changes
// nothing in the kernel (it cannot read the desired state, so it does not
// guess): running volumes keep serving I/O with the tables they have. The
// outage is reported through Config.OnEtcdUp (the daemon's
// tidecache_etcd_up gauge) and EtcdUp, and the list is retried with
// backoff. When the store answers
// again the controller lists afresh and reconciles every volume.
//
// # Errors and restarts
//
// What the controller remembers between reconciles (which specs it saw
// naming this node, SSD media-error baselines, flush times, latches) is
// rebuilt on restart: latches from the status, baselines from the first
// reading (media errors that appeared while the daemon was down count as
// already seen), flush times from the start.
package reconcile
