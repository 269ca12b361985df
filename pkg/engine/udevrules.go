// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tidecache/tidecache/pkg/atomicfile"
	"github.com/tidecache/tidecache/pkg/pool"
)

// An adopted device still carries its filesystem, so udev would publish
// it under /dev/disk/by-uuid and by-label, where a mount by UUID (fstab,
// a rescue shell) finds it: the bare device, without the writes the cache
// still holds. For md arrays the link is even the preferred one
// (63-md-raid-arrays.rules gives md link_priority 100). tidecache writes a
// rules file naming each adopted device by its identity, which takes those
// links off it (the cached volume, /dev/mapper/tc-<name>, shows the same
// filesystem and gets them) and tells udisks to leave it alone. The file
// is derived state: adopt and detach rewrite it, and so does every boot
// assembly, from the layouts on the SSDs.

// AdoptedRulesFile is the name of the generated rules file. It sorts
// after 60-persistent-storage and 63-md-raid-arrays, which make the links
// it takes away.
const AdoptedRulesFile = "64-tidecache-adopted.rules"

// dropFSLinks is a udev PROGRAM that prints the device's links, one per
// line, without those that name a filesystem or a partition; SYMLINK="%c"
// then makes that the device's list of links. $links is udev's, $$ a
// dollar for the shell; the value holds no double quote, which would end
// it.
const dropFSLinks = `/bin/sh -c 'for l in $links; do case $$l in disk/by-uuid/*|disk/by-label/*|disk/by-partuuid/*|disk/by-partlabel/*) ;; *) echo $$l ;; esac; done'`

// adoptedMatch returns the udev match for a's device: the most specific
// identifier it has. md arrays are matched by the UUID that
// 63-md-raid-arrays imports, partitions by the entry UUID that
// 60-persistent-storage's blkid import sets, disks and LUNs by the sysfs
// attributes they were identified by (ATTRS: the partitions of an adopted
// disk match too).
func adoptedMatch(a pool.Adopted) string {
	switch {
	case a.MDUUID != "":
		return fmt.Sprintf(`ENV{MD_UUID}==%q`, a.MDUUID)
	case a.PartUUID != "":
		return fmt.Sprintf(`ENV{ID_PART_ENTRY_UUID}==%q`, a.PartUUID)
	case a.WWN != "":
		return fmt.Sprintf(`ATTRS{wwid}==%q`, a.WWN)
	default:
		return fmt.Sprintf(`ATTRS{serial}==%q`, a.Serial)
	}
}

// adoptedEntries returns the rules entry of each adopted volume of the
// layouts, by "pool/volume": a comment line and the match line.
func adoptedEntries(layouts []*pool.Layout) map[string]string {
	entries := map[string]string{}
	for _, l := range layouts {
		for _, v := range l.Volumes {
			if v.Adopted == nil || !v.Adopted.HasIdentity() {
				continue
			}
			key := l.Name + "/" + v.Name
			entries[key] = fmt.Sprintf("# volume %s of pool %s caches %s: mount /dev/mapper/tc-%s\n%s, ENV{TIDECACHE_ADOPTED}=\"%s\"\n",
				v.Name, l.Name, v.Adopted, v.Name, adoptedMatch(*v.Adopted), key)
		}
	}
	return entries
}

const adoptedKeyField = `ENV{TIDECACHE_ADOPTED}="`

// parseAdoptedEntries reads the entries of a rules file adoptedRules
// wrote, by "pool/volume".
func parseAdoptedEntries(rules []byte) map[string]string {
	entries := map[string]string{}
	lines := strings.Split(string(rules), "\n")
	for i, line := range lines {
		_, rest, ok := strings.Cut(line, ", "+adoptedKeyField)
		if !ok || i == 0 || !strings.HasPrefix(lines[i-1], "# volume ") {
			continue
		}
		key, _, ok := strings.Cut(rest, `"`)
		if ok && key != "" {
			entries[key] = lines[i-1] + "\n" + line + "\n"
		}
	}
	return entries
}

// adoptedRules renders the rules file for entries; nil when there are
// none.
func adoptedRules(entries map[string]string) []byte {
	if len(entries) == 0 {
		return nil
	}
	keys := make([]string, 0, len(entries))
	for k := range entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteString(`# Written by tidecache (volume adopt, volume detach, boot assembly); do not edit.
# Each device below is cached by tidecache and may lack writes that are
# still in its cache: its filesystem is reached through /dev/mapper/tc-<name>
# alone, so udev gives it no /dev/disk/by-uuid, by-label or by-partuuid link
# and udisks ignores it. An entry leaves only with volume detach, not when
# its pool is missing at boot (an SSD late or dead): the device may lack
# writes all the same.
SUBSYSTEM!="block", GOTO="tidecache_adopted_end"
ACTION=="remove", GOTO="tidecache_adopted_end"

`)
	for _, k := range keys {
		b.WriteString(entries[k])
	}
	fmt.Fprintf(&b, `
ENV{TIDECACHE_ADOPTED}!="?*", GOTO="tidecache_adopted_end"
PROGRAM="%s", SYMLINK="%%c"
ENV{UDISKS_IGNORE}="1"
LABEL="tidecache_adopted_end"
`, dropFSLinks)
	return b.Bytes()
}

// layoutsWith returns the layouts found on this node, with changed in
// place of the layout of pool p (nil: none replaced).
func layoutsWith(found scanResult, p *poolState, changed *pool.Layout) []*pool.Layout {
	var out []*pool.Layout
	for _, q := range found.sortedPools() {
		if q == p {
			out = append(out, changed)
		} else {
			out = append(out, q.Layout)
		}
	}
	return out
}

// syncAdoptedRules adds the adopted volumes of layouts to the rules file
// and drops the volume named by drop ("pool/volume", detached; "" for
// none). Entries of pools not in layouts stay: a pool whose SSD is late
// or dead at boot still has dirty data for its device. When the content
// changes and udevd runs, udev applies it to devices (the adopted devices
// just added or removed: their links change now rather than at their
// next event). Without a rules directory (Config.UdevRulesDir "") it does
// nothing.
func (e *Engine) syncAdoptedRules(ctx context.Context, layouts []*pool.Layout, drop string, devices ...string) error {
	if e.cfg.UdevRulesDir == "" {
		return nil
	}
	path := filepath.Join(e.cfg.UdevRulesDir, AdoptedRulesFile)
	have, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("udev rules for adopted devices: %w", err)
	}
	entries := parseAdoptedEntries(have)
	maps.Copy(entries, adoptedEntries(layouts))
	delete(entries, drop)
	want := adoptedRules(entries)
	switch {
	case errors.Is(err, os.ErrNotExist) && want == nil:
		return nil
	case err == nil && bytes.Equal(have, want):
		return nil
	}
	if want == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("udev rules for adopted devices: %w", err)
		}
	} else if err := writeRules(path, want); err != nil {
		return fmt.Errorf("udev rules for adopted devices: %w", err)
	}
	e.log.Info("udev rules for adopted devices written", "path", path, "removed", want == nil)
	if _, err := os.Stat(e.udevControl); err != nil {
		return nil // no udevd: the rules apply from its next start
	}
	if _, err := e.runner.Run(ctx, "udevadm", "control", "--reload"); err != nil {
		return fmt.Errorf("udev rules for adopted devices: reload: %w", err)
	}
	for _, dev := range devices {
		if dev == "" {
			continue
		}
		if _, err := e.runner.Run(ctx, "udevadm", "trigger", "--action=change", "--settle", dev); err != nil {
			return fmt.Errorf("udev rules for adopted devices: apply to %s: %w", dev, err)
		}
	}
	return nil
}

// writeRules replaces the rules file at path whole (atomicfile.Write),
// creating its directory if needed.
func writeRules(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o644)
}
