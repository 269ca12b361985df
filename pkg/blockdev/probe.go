// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/tidecache/tidecache/pkg/command"
)

// UsagePartitionTable is the Usage of a Signature that is a partition table.
const UsagePartitionTable = "partition_table"

// Signature is one on-disk format found on a device.
type Signature struct {
	// Type is blkid's name for it: "ext4", "xfs", "swap",
	// "linux_raid_member", "LVM2_member", "crypto_LUKS", or for a
	// partition table "gpt", "dos".
	Type string
	// Usage is blkid's class: "filesystem", "raid", "crypto", "other", or
	// UsagePartitionTable.
	Usage string
	// Label and UUID are those of the filesystem, array or volume, if any
	// (for a partition table, UUID is its PTUUID; for an md member, Label
	// is the array name "homehost:name").
	Label string
	UUID  string
	// BlockSize is the smallest I/O the filesystem does, in bytes, as
	// blkid reports it (BLOCK_SIZE: an ext4 block, an XFS sector); 0
	// when unknown. A device under it must not have larger logical
	// blocks, or the filesystem cannot be mounted there.
	BlockSize uint32
}

// Prober finds signatures (filesystems, RAID and LVM members, LUKS, swap,
// partition tables) on devices with blkid.
//
// It does not recognise tidecache's own superblock; pkg/superblock does.
type Prober struct {
	Runner command.Runner
}

// blkid exit codes (blkid(8)).
const (
	blkidExitNotFound   = 2 // nothing detected
	blkidExitAmbivalent = 8 // more than one signature, conflicting
)

// Probe returns the signatures on the device (or image file) at path; an
// empty slice means none was found. It runs "blkid -p -d -o export": -p
// reads the device itself, bypassing the blkid cache, and probes for both
// superblocks (TYPE) and partition tables (PTTYPE). When blkid reports an
// ambivalent result (conflicting signatures, e.g. an old RAID member with
// a newer filesystem over it), every signature is listed with
// "wipefs --no-act".
//
// A path that does not exist or cannot be read is an error, never "no
// signature": blkid's "nothing found" exit code is only trusted after the
// device was read successfully.
func (p Prober) Probe(ctx context.Context, path string) ([]Signature, error) {
	dev, err := Lookup(path)
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", path, err)
	}
	if err := checkReadable(dev.Path); err != nil {
		return nil, fmt.Errorf("probe %s: %w", path, err)
	}
	out, err := p.Runner.Run(ctx, "blkid", "-p", "-d", "-o", "export", dev.Path)
	var ee *command.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Code == blkidExitNotFound:
		return []Signature{}, nil
	case errors.As(err, &ee) && ee.Code == blkidExitAmbivalent:
		return p.probeAll(ctx, path, dev.Path)
	default:
		return nil, fmt.Errorf("probe %s: %w", path, err)
	}
	sigs, err := parseBlkidExport(out)
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", path, err)
	}
	return sigs, nil
}

func (p Prober) probeAll(ctx context.Context, path, devPath string) ([]Signature, error) {
	out, err := p.Runner.Run(ctx, "wipefs", "--no-act", "--json", "--output", "TYPE,USAGE,LABEL,UUID,OFFSET", devPath)
	if err != nil {
		return nil, fmt.Errorf("probe %s: blkid found conflicting signatures; listing them: %w", path, err)
	}
	sigs, err := parseWipefsJSON(out)
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", path, err)
	}
	if len(sigs) == 0 {
		return nil, fmt.Errorf("probe %s: blkid found conflicting signatures but wipefs lists none", path)
	}
	return sigs, nil
}

// checkReadable reads the first sector of path, so that a device that
// cannot be opened or read is not mistaken for an empty one.
func checkReadable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 4096)
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// parseBlkidExport parses the output of "blkid -p -d -o export <dev>":
//
//	DEVNAME=/dev/vdb
//	LABEL=my\ disk
//	UUID=f49e1a20-cf28-446a-8006-cf86a5ef6aad
//	TYPE=ext4
//	USAGE=filesystem
//	PTUUID=78563412
//	PTTYPE=dos
//
// One KEY=value per line; blkid puts a backslash before space, quotes,
// backslash and the characters $`<> in values. TYPE (with USAGE, LABEL,
// UUID) is the superblock found, PTTYPE (with PTUUID) the partition table;
// either or both may be present. PART_ENTRY_* keys describe the partition
// the device is, not content on it, and are ignored.
func parseBlkidExport(out []byte) ([]Signature, error) {
	kv := map[string]string{}
	for n, line := range strings.Split(string(out), "\n") {
		if line == "" {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("blkid output line %d: no KEY=value: %q", n+1, line)
		}
		kv[key] = unescapeBlkid(value)
	}
	sigs := []Signature{}
	if t := kv["TYPE"]; t != "" {
		sig := Signature{Type: t, Usage: kv["USAGE"], Label: kv["LABEL"], UUID: kv["UUID"]}
		if bs, err := strconv.ParseUint(kv["BLOCK_SIZE"], 10, 32); err == nil {
			sig.BlockSize = uint32(bs)
		}
		sigs = append(sigs, sig)
	}
	if t := kv["PTTYPE"]; t != "" {
		sigs = append(sigs, Signature{Type: t, Usage: UsagePartitionTable, UUID: kv["PTUUID"]})
	}
	if len(sigs) == 0 && kv["PART_ENTRY_SCHEME"] != "" {
		// A blank partition: blkid -p exits 0 because it describes the
		// partition itself (PART_ENTRY_*), and found nothing on it.
		return sigs, nil
	}
	if len(sigs) == 0 {
		// blkid exits 2 when it finds nothing; other output without a
		// type means we misread it, and "no signature" must never be a
		// guess.
		return nil, fmt.Errorf("blkid output has neither TYPE nor PTTYPE: %q", out)
	}
	return sigs, nil
}

func unescapeBlkid(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseWipefsJSON parses "wipefs --no-act --json --output
// TYPE,USAGE,LABEL,UUID,OFFSET <dev>":
//
//	{"signatures": [
//	   {"type": "ext4", "usage": "filesystem", "label": null, "uuid": "...", "offset": "0x438"},
//	   {"type": "dos", "usage": "partition-table", "label": null, "uuid": null, "offset": "0x1fe"}
//	]}
//
// wipefs spells the partition table usage "partition-table"; it becomes
// UsagePartitionTable as with blkid.
func parseWipefsJSON(out []byte) ([]Signature, error) {
	var doc struct {
		Signatures []struct {
			Type  string  `json:"type"`
			Usage string  `json:"usage"`
			Label *string `json:"label"`
			UUID  *string `json:"uuid"`
		} `json:"signatures"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("parse wipefs output: %w", err)
	}
	sigs := make([]Signature, 0, len(doc.Signatures))
	for _, s := range doc.Signatures {
		if s.Type == "" {
			return nil, fmt.Errorf("parse wipefs output: signature without type")
		}
		sig := Signature{Type: s.Type, Usage: s.Usage}
		if sig.Usage == "partition-table" {
			sig.Usage = UsagePartitionTable
		}
		if s.Label != nil {
			sig.Label = *s.Label
		}
		if s.UUID != nil {
			sig.UUID = *s.UUID
		}
		sigs = append(sigs, sig)
	}
	return sigs, nil
}
