// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/blockdev"
	"github.com/tidecache/tidecache/pkg/command"
	"github.com/tidecache/tidecache/pkg/nvmeof"
	"github.com/tidecache/tidecache/pkg/pool"
	"github.com/tidecache/tidecache/pkg/store"
)

// A node's NVMe/TCP target serves two kinds of storage to other nodes:
// the replicas it keeps of their write caches (replicas.go) and the
// shared devices given with --export, such as a SAN LUN or an md RAID10
// that stands for one, which a volume's origin can be and on which the
// volume can fail over to another node. Both are cut off from a node the
// cluster fenced (api.Fence): serveTarget removes every export and every
// replica export the fenced node could write through, and only then
// acknowledges the fence in the node record (api.Node.FencesApplied).
//
// Each export has one subsystem per node it is served to, allowing that
// node's host NQN alone, so a fence removes one subsystem and leaves the
// other nodes' I/O alone. Every subsystem of an export carries the same
// namespace UUID (nvmeof.ExportUUID), so every node finds the device by
// the same wwid, "uuid.<UUID>". A node gets its subsystem once it has
// registered; a node that is merely down keeps it (its kernel reconnects
// when it is back); only a fence removes it. Without etcd nothing
// changes: the subsystems in place stay, and the fences last read stay
// applied, across a restart too (fencestate.go).

// Export is a shared device this node exports to the others
// (tidecached run --export NAME=DEVICE).
type Export struct {
	// Name names the export in the node record and in its subsystems'
	// NQNs, and its namespace UUID is derived from it: keep it when the
	// device's path changes.
	Name string
	// Device is the block device, e.g. /dev/md/san.
	Device string
}

// ParseExport parses NAME=DEVICE.
func ParseExport(s string) (Export, error) {
	name, dev, ok := strings.Cut(s, "=")
	if !ok {
		return Export{}, fmt.Errorf("%q: want NAME=DEVICE", s)
	}
	e := Export{Name: name, Device: dev}
	return e, e.validate()
}

func (e Export) validate() error {
	if err := pool.ValidateName("export", e.Name); err != nil {
		return err
	}
	if !filepath.IsAbs(e.Device) {
		return fmt.Errorf("export %s: device %q: want an absolute path", e.Name, e.Device)
	}
	return nil
}

// validateExports checks the --export list: valid, unique names, and a
// replica address for the target to listen on.
func validateExports(exports []Export, replicaAddress string) error {
	seen := map[string]bool{}
	for _, e := range exports {
		if err := e.validate(); err != nil {
			return fmt.Errorf("config export: %w", err)
		}
		if seen[e.Name] {
			return fmt.Errorf("config export: %s given twice", e.Name)
		}
		seen[e.Name] = true
	}
	if len(exports) > 0 && replicaAddress == "" {
		return errors.New("config export: needs --replica-address, the address the NVMe/TCP target listens on")
	}
	return nil
}

// targetState is what serveTarget knows and did, for the node record. Its
// zero value serves on the system's configfs.
type targetState struct {
	// target is the NVMe target; a zero Root means the system's.
	target nvmeof.Target
	// replicaRound serialises the replica rounds (the daemon's loop and
	// the controller's calls), so a round that read the fences before a
	// new one arrived never exports after a round that withheld.
	replicaRound sync.Mutex

	mu sync.Mutex
	// fenced is the last fence list read, by node, at the fence's
	// ModRevision; this node's own fence is left out. Until etcd first
	// answers it is the list the last run saved (fencestate.go); saved is
	// what the state file holds.
	fenced map[string]int64
	saved  map[string]int64
	// replicasCut are the fenced owners the last replica round withheld
	// every replica of.
	replicasCut map[string]bool
	exports     []api.ExportInventory
	acks        []api.FenceAck
	// allowed is the NVMe/TCP allow-list in force (nvmeallow.go), once
	// allowApplied; nodes are the node records last read (nil before
	// the first read), whose addresses it admits.
	allowed      []netip.Addr
	allowApplied bool
	nodes        []store.Item[api.Node]
	// known are the addresses of each node the list admits, kept for
	// a node whose record is missing for a moment.
	known map[string][]netip.Addr
	// checkUnused checks a device before its first export; nil is
	// blockdev.Checker's CheckUnused (tests replace it: their devices are
	// files).
	checkUnused func(ctx context.Context, path string, ownNvmet func(nqn string) bool) error
	// refused and warned are the target round's own (serveTarget: one
	// goroutine), unguarded.
	//
	// refused holds, by export, why its device was last found in use and
	// when to look again: a device in use is checked again after a
	// growing wait (exportRecheck), not with a scan of /proc every round.
	refused map[string]exportRefusal
	// warned is, by export, the error last logged and when: the same
	// error is repeated on the log at most every exportWarnRepeat.
	warned map[string]exportWarning
	// now is the clock; nil is time.Now.
	now func() time.Time
}

// exportRefusal is why an export's device was refused, and when it is
// checked again.
type exportRefusal struct {
	err  error
	wait time.Duration
	next time.Time
}

// exportWarning is the last error logged for an export, and when.
type exportWarning struct {
	text string
	at   time.Time
}

// How long a device found in use waits before it is checked again: the
// first wait, doubled each time up to the last.
const (
	exportRecheckFirst = 5 * time.Second
	exportRecheckMax   = time.Minute
	exportWarnRepeat   = 10 * time.Minute
)

func (s *targetState) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

func (s *targetState) nvmet() nvmeof.Target {
	if s.target.Root == "" {
		return nvmeof.NewTarget()
	}
	return s.target
}

// fencedSet returns the nodes fenced, as last read.
func (s *targetState) fencedSet() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for n := range s.fenced {
		out[n] = true
	}
	return out
}

// exportRecord is what the node record says of the target: the exports
// and the fences carried out. inventory puts it in api.Node.Exports and
// api.Node.FencesApplied.
func (d *daemon) exportRecord() ([]api.ExportInventory, []api.FenceAck) {
	s := &d.tgt
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.exports), slices.Clone(s.acks)
}

// serveTarget runs targetRound every replicaInterval, and at once when a
// fence is put or deleted: a failover waits for the acknowledgement.
func (d *daemon) serveTarget(ctx context.Context) {
	kick := make(chan struct{}, 1)
	watching := false
	t := time.NewTicker(replicaInterval)
	defer t.Stop()
	for {
		if rev := d.targetRound(ctx); rev > 0 && !watching {
			// From the revision the round read: no fence written since
			// is missed.
			watching = true
			go d.watchFences(ctx, rev+1, kick)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
	}
}

// watchFences signals kick on every change of a fence record from
// revision from on. A watch that fails is started again, from now, after
// a pause; the rounds' interval covers what it missed.
func (d *daemon) watchFences(ctx context.Context, from int64, kick chan<- struct{}) {
	for ctx.Err() == nil {
		for res := range d.st.Watch(ctx, from) {
			if res.Err != nil {
				break
			}
			if slices.ContainsFunc(res.Events, func(e store.Event) bool { return e.Kind == store.KindFence }) {
				select {
				case kick <- struct{}{}:
				default:
				}
			}
		}
		from = 0
		sleep(ctx, replicaInterval)
	}
}

// targetRound reads the fences and the registered nodes, serves the
// exports and the replicas accordingly, and acknowledges every fence
// whose node no longer reaches anything here. The node record is
// published at once when any of it changed. It returns the revision of
// the fence list it read, 0 if etcd did not answer.
func (d *daemon) targetRound(ctx context.Context) int64 {
	s := &d.tgt
	var nodes []string
	if d.keys != nil {
		// A rotation first, so this round's exports get the new secrets.
		kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		d.keys.rotateIfAsked(kctx)
		cancel()
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	fences, rev, _, ferr := d.st.ListFences(lctx)
	items, _, _, nerr := d.st.ListNodes(lctx)
	cancel()
	if ferr == nil {
		fenced := map[string]int64{}
		for _, f := range fences {
			if f.Value.Node != d.cfg.Node {
				fenced[f.Value.Node] = f.Meta.ModRevision
			}
		}
		s.mu.Lock()
		if !maps.Equal(fenced, s.fenced) {
			d.log.Info("fences read", "fenced", slices.Sorted(maps.Keys(fenced)))
		}
		s.fenced = fenced
		s.mu.Unlock()
		d.persistFences(fenced)
	}
	if ferr == nil && nerr == nil {
		for _, n := range items {
			nodes = append(nodes, n.Value.Name)
		}
	}
	if nerr == nil && d.keys != nil {
		d.keys.setNodes(items)
	}
	fenced := s.fencedSet()
	exports, exportsCut := d.serveExports(ctx, ferr == nil && nerr == nil, nodes, fenced)
	d.replicaKept(ctx)
	if ferr == nil && nerr == nil {
		s.mu.Lock()
		s.nodes = items
		s.mu.Unlock()
	}
	d.keepNVMeAllowList(ctx)

	s.mu.Lock()
	var acks []api.FenceAck
	for _, n := range slices.Sorted(maps.Keys(s.fenced)) {
		if exportsCut[n] && s.replicasCut[n] {
			acks = append(acks, api.FenceAck{Node: n, Revision: s.fenced[n]})
		}
	}
	changed := !reflect.DeepEqual(exports, s.exports) || !reflect.DeepEqual(acks, s.acks)
	for _, a := range acks {
		if !slices.Contains(s.acks, a) {
			d.log.Warn("fence applied: nothing is served to the node any more", "fenced_node", a.Node, "revision", a.Revision)
		}
	}
	s.exports, s.acks = exports, acks
	s.mu.Unlock()
	hosts := map[string]int{}
	for _, e := range exports {
		hosts[e.Name] = len(e.Hosts)
	}
	d.dmet.SetExports(hosts)
	d.dmet.SetFencesApplied(len(acks))
	if changed {
		d.publishNow()
	}
	if ferr != nil {
		return 0
	}
	return rev
}

// exportKey is the secret the target requires of node n: none without
// in-band authentication in the kernel.
func (d *daemon) exportKey(ctx context.Context, n string) (string, error) {
	if d.keys == nil {
		return "", nil
	}
	return d.keys.ExportKey(ctx, n)
}

// publishNow asks membership to publish the node record now.
func (d *daemon) publishNow() {
	select {
	case d.inventoryNow <- struct{}{}:
	default:
	}
}

// serveExports cuts every fenced node off the exports (fenceExports)
// and, when the cluster answered (live), exports each configured device
// to every registered node that is neither this one nor fenced; nodes
// already served stay served. It returns the exports for the node record
// and the fenced nodes cut off from all exports.
func (d *daemon) serveExports(ctx context.Context, live bool, nodes []string, fenced map[string]bool) ([]api.ExportInventory, map[string]bool) {
	tg := d.tgt.nvmet()
	cut, failed := d.fenceExports(tg, fenced)
	if len(d.cfg.Exports) == 0 {
		return nil, cut
	}
	addr, port, err := replicaAddress(d.cfg.ReplicaAddress)
	if err != nil {
		return nil, map[string]bool{} // Validate refused it already
	}
	var out []api.ExportInventory
	for _, e := range d.cfg.Exports {
		inv := api.ExportInventory{Name: e.Name, UUID: nvmeof.ExportUUID(e.Name)}
		var errs []error
		subs, err := tg.Subsystems(nvmeof.ExportNQNPrefix(e.Name))
		if err != nil {
			d.log.Warn("export: listing its subsystems failed", "export", e.Name, "err", err)
			inv.Error = err.Error()
			out = append(out, inv)
			continue
		}
		served := map[string]bool{}
		for _, sub := range subs {
			if err := failed[sub.NQN]; err != nil {
				errs = append(errs, err)
			}
			for _, n := range nodesOf(sub) {
				served[n] = true
			}
		}
		size, sizeErr := blockdev.Size(e.Device)
		if sizeErr != nil {
			errs = append(errs, sizeErr)
		} else if len(subs) == 0 {
			// Not exported yet (this boot): the device must be free,
			// not a mounted file system, a member of a local pool or
			// array, or open by a process; its own subsystems aside.
			sizeErr = d.exportFree(ctx, e)
			if sizeErr != nil {
				errs = append(errs, sizeErr)
			}
		}
		inv.SizeBytes = size
		// The nodes served stay served (Export again finishes what an
		// interrupted one left); the registered ones are added.
		want := maps.Clone(served)
		if live {
			for _, n := range nodes {
				want[n] = true
			}
		}
		for _, n := range slices.Sorted(maps.Keys(want)) {
			if n == d.cfg.Node || fenced[n] {
				continue
			}
			if sizeErr != nil {
				break // the device is missing or in use: nothing is exported
			}
			if err := d.ensureNvmet(ctx, tg); err != nil {
				errs = append(errs, err)
				break
			}
			key, err := d.exportKey(ctx, n)
			if err != nil {
				errs = append(errs, fmt.Errorf("export %s to %s: %w", e.Name, n, err))
				continue
			}
			x := nvmeof.Export{NQN: nvmeof.ExportNQN(e.Name, n), Device: e.Device, HostNQN: nvmeof.HostNQN(n), HostKey: key, Addr: addr, Port: port, UUID: inv.UUID}
			if err := tg.Export(x); err != nil {
				errs = append(errs, err)
				continue
			}
			if !served[n] {
				served[n] = true
				d.log.Info("exported to a node", "export", e.Name, "to_node", n, "nqn", x.NQN, "device", e.Device)
			}
		}
		inv.Hosts = slices.Sorted(maps.Keys(served))
		if err := errors.Join(errs...); err != nil {
			inv.Error = err.Error()
		}
		d.warnExport(e.Name, inv.Error)
		out = append(out, inv)
	}
	return out, cut
}

// exportFree checks that the device of export e is used by nothing on
// this node before it is first exported: other nodes write it once it
// is. Its own subsystems are not a use of it.
func (d *daemon) exportFree(ctx context.Context, e Export) error {
	prefix := nvmeof.ExportNQNPrefix(e.Name)
	check := d.tgt.checkUnused
	if check == nil {
		check = func(ctx context.Context, path string, own func(string) bool) error {
			return blockdev.Checker{NvmetAllowed: own}.CheckUnused(ctx, path)
		}
	}
	now := d.tgt.clock()
	r, wasRefused := d.tgt.refused[e.Name]
	if wasRefused && now.Before(r.next) {
		return r.err
	}
	if err := check(ctx, e.Device, func(nqn string) bool { return strings.HasPrefix(nqn, prefix) }); err != nil {
		r.err = fmt.Errorf("export %s: not exported: %w", e.Name, err)
		r.wait = min(max(2*r.wait, exportRecheckFirst), exportRecheckMax)
		r.next = now.Add(r.wait)
		if d.tgt.refused == nil {
			d.tgt.refused = map[string]exportRefusal{}
		}
		d.tgt.refused[e.Name] = r
		return r.err
	}
	delete(d.tgt.refused, e.Name)
	return nil
}

// warnExport logs why an export is not fully served: when the reason
// changes, and then at most every exportWarnRepeat (the node record and
// tidectl show it meanwhile); once more when it is served again.
func (d *daemon) warnExport(name, text string) {
	now := d.tgt.clock()
	w, ok := d.tgt.warned[name]
	switch {
	case text == "" && ok:
		delete(d.tgt.warned, name)
		d.log.Info("export served again", "export", name)
	case text == "":
	case !ok || w.text != text || now.Sub(w.at) >= exportWarnRepeat:
		if d.tgt.warned == nil {
			d.tgt.warned = map[string]exportWarning{}
		}
		d.tgt.warned[name] = exportWarning{text: text, at: now}
		d.log.Warn("export not fully served", "export", name, "err", text)
	}
}

// fenceExports removes every export subsystem on the target that allows
// a fenced node, those of exports no longer configured too. It returns
// the fenced nodes no export subsystem allows any more, and the
// subsystems it failed to remove, with the error.
func (d *daemon) fenceExports(tg nvmeof.Target, fenced map[string]bool) (map[string]bool, map[string]error) {
	cut, failed := map[string]bool{}, map[string]error{}
	if len(fenced) == 0 {
		return cut, failed
	}
	subs, err := tg.Subsystems("")
	if err != nil {
		// What is served is unknown: no fence is carried out.
		d.log.Warn("fence: listing the target's subsystems failed", "err", err)
		return cut, failed
	}
	maps.Copy(cut, fenced)
	for _, sub := range subs {
		if !nvmeof.IsExportNQN(sub.NQN) {
			continue // a replica's: ServeReplicasFenced sees to it
		}
		hosts := nodesOf(sub)
		if !slices.ContainsFunc(hosts, func(n string) bool { return fenced[n] }) {
			continue
		}
		if err := tg.Unexport(sub.NQN); err != nil {
			failed[sub.NQN] = err
			for _, n := range hosts {
				delete(cut, n)
			}
			d.log.Error("fence: removing an export from a fenced node failed; the fence is not acknowledged", "nqn", sub.NQN, "err", err)
			continue
		}
		d.log.Warn("export removed from a fenced node: its writes in flight are done", "nqn", sub.NQN, "fenced_node", strings.Join(hosts, ","))
	}
	return cut, failed
}

// nodesOf returns the nodes a subsystem allows.
func nodesOf(sub nvmeof.Subsystem) []string {
	var out []string
	for _, h := range sub.Hosts {
		if n, ok := nvmeof.NodeOfHostNQN(h); ok {
			out = append(out, n)
		}
	}
	return out
}

// ensureNvmet loads the NVMe/TCP target when its configfs is absent.
func (d *daemon) ensureNvmet(ctx context.Context, tg nvmeof.Target) error {
	if _, err := os.Stat(tg.Root); err == nil {
		return nil
	}
	_, err := command.Runner{Logger: d.log}.Run(ctx, "modprobe", "nvmet-tcp")
	return err
}
