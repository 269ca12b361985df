// SPDX-License-Identifier: Apache-2.0

// Package policy owns the decisions tidecached takes for a volume from its
// desired state and what it observes: which cache mode the volume must run
// in right now, which alerts it raises, and whether a scheduled flush is
// due. It is pure: no I/O, no clock (the caller passes now), no state kept
// between calls (the caller carries the sticky Latch from one decision to
// the next). pkg/reconcile gathers the inputs and applies the decision.
//
// # Effective policy
//
// A volume names a policy (VolumeSpec.Policy); it is laid field by field
// over the cluster policy called "default", which is laid over Builtin.
// A field the named policy leaves at its zero value (nil pointer, empty
// string, 0) inherits the default policy's value. A zero that ends up in
// the effective policy means "off", as api.Policy documents for each field.
// So a named policy can tighten or change what the default enables but not
// switch it off (a record cannot tell "unset" from 0); keep features that
// only some volumes want out of the default policy.
//
// # Rules
//
// The rules below are evaluated in this order. Each rule can only lower the
// mode (writeback > writethrough > passthrough, ranked by how much the SSD
// holds that the HDDs lack), never raise it, so a volume whose spec asks
// for passthrough stays in passthrough whatever happens to its SSD.
//
//  1. Wanted mode. The spec's Mode; when empty, the policy's Mode; when
//     that is empty too, the mode the volume's shape implies: writeback
//     with a write-cache slice, else writethrough with a read-cache slice,
//     else passthrough. Asking for writeback without a write-cache slice
//     is an invalid spec (ErrInvalid).
//  2. Node drain. NodeSpec.Drain makes every volume of the node
//     passthrough. The engine drains each write tier (dirty blocks written
//     back, proven zero while suspended) before it is removed, so a
//     drained node holds nothing on its SSDs the HDDs lack and its SSDs can
//     be pulled.
//  3. SSD error. Any of: the dm-writecache error field is non-zero, an SSD
//     under the volume (an SSD of the volume's pool) sets a SMART critical
//     warning, or reports media errors the operator has not acknowledged.
//     A critical alert "ssd_error" is raised and, with Policy.OnSSDError
//     "writethrough" (the default), the mode is lowered to writethrough;
//     with "none" the mode is left alone (the alert is all). This rule is
//     sticky, see below.
//  4. SSD wear. An SSD of the volume's pool at or above
//     WearThresholdPercent (0, the default, is off) of its rated endurance
//     lowers the mode to writethrough and raises a warning alert
//     "ssd_wear". Wear
//     never goes down, so this rule needs no latch: it holds until the SSD
//     is replaced or the threshold raised.
//  5. Degraded origin. When the pool's HDD array (an md RAID10) runs
//     with a slot lacking an in-sync member (a failed disk, or a
//     replacement still being rebuilt), a warning alert "origin_degraded"
//     names the array, the failed members and the rebuild's progress. The
//     mode is deliberately kept. A degraded array does not put the dirty
//     data on the SSD at any new risk (it is as safe, or as exposed, as
//     before), while lowering to writethrough would hurt exactly when it
//     matters: the drain writes every dirty block to the array at once, and
//     afterwards every application write waits for the degraded array,
//     competing with the rebuild that md throttles while other I/O runs.
//     Keeping the write cache keeps the write load coalesced and
//     sequential, so the rebuild, the window in which a second failure in
//     the same mirror pair loses the array, ends sooner. The alert clears
//     when the rebuild completes. (An origin that fails outright fails the
//     write-back: dm-writecache then reports an error and rule 3 applies.)
//  6. Scheduled flush. When the resulting mode is writeback, FlushInterval
//     is positive, the write tier holds dirty blocks and FlushInterval has
//     passed since the last flush, FlushNow is set. FlushIn always says
//     when the next flush is due, so the caller can come back then.
//
// # Sticky SSD errors and how the operator clears them
//
// An SSD error can be transient (a cable, a controller reset) and the
// evidence can vanish (the write tier, and with it its error field, is
// removed when the volume leaves writeback). Switching back to writeback on
// an SSD that failed once would put acknowledged writes on a device known
// to lose them, so rule 3 latches: the Decision carries a Latch recording
// the spec revision (VolumeSpec ModRevision) it tripped at, and as long as
// the caller passes it back and the spec revision has not moved past it,
// the mode stays capped and the critical alert stays raised, whatever the
// SSD reports.
//
// The acknowledgement is any write of the volume's spec after the error
// (for example `tidectl volume set-mode NAME writeback`, or re-applying the
// spec): it bumps the spec's ModRevision above the latch's, which clears
// the latch. If the error is still present it trips again at once at the
// new revision; the operator cannot clear a live error, only an old one.
// The latch is deliberately not cleared by a policy or node change, which
// are cluster-wide and not an operator looking at this volume. The
// caller keeps the latch across restarts through the volume status: the
// critical alert's text carries the latch, and LatchFromAlerts reads it
// back.
//
// Media-error counters in SMART data only ever grow, so the caller passes
// the errors not yet acknowledged (SSD.MediaErrors), not the lifetime
// count; pkg/reconcile keeps the baseline and moves it on acknowledgement.
package policy
