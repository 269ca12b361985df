// SPDX-License-Identifier: Apache-2.0

package mdraid

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// uuidPattern is mdadm's spelling of an array UUID: four groups of eight
// hex digits separated by colons.
var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}(:[0-9a-f]{8}){3}$`)

// NormalizeUUID lowercases an md UUID and checks that it has mdadm's form
// "xxxxxxxx:xxxxxxxx:xxxxxxxx:xxxxxxxx".
func NormalizeUUID(uuid string) (string, error) {
	u := strings.ToLower(strings.TrimSpace(uuid))
	if !uuidPattern.MatchString(u) {
		return "", fmt.Errorf("md UUID %q is not of the form xxxxxxxx:xxxxxxxx:xxxxxxxx:xxxxxxxx", uuid)
	}
	return u, nil
}

// detail is what "mdadm --detail --export" tells about an array.
type detail struct {
	level       string // "10", "1", "0", "linear", "container"...
	raidDevices int
	metadata    string
	uuid        string
	devName     string // name under /dev/md/, from mdadm's map file
	name        string // name in the superblock, "homehost:name"
	devices     []string
	spares      []string
}

// member is one MD_DEVICE_<dev>_* group.
type member struct {
	role int // slot, or -1 for a spare or failed device
	dev  string
}

// parseDetailExport parses "mdadm --detail --export <md>" (mdadm 4.x):
//
//	MD_LEVEL=raid10
//	MD_DEVICES=4
//	MD_METADATA=1.2
//	MD_UUID=3b2a4c1e:8f0d2b6a:5c7e9d10:2f4a6b8c
//	MD_DEVNAME=tc-origin
//	MD_NAME=any:tc-origin
//	MD_DEVICE_dev_vdb_ROLE=0
//	MD_DEVICE_dev_vdb_DEV=/dev/vdb
//
// MD_LEVEL and MD_DEVICES are always printed; MD_UUID, MD_DEVNAME and
// MD_NAME only when mdadm could read them. Each member has a ROLE (its slot
// number, or "spare" for spares and failed devices) and, when mdadm found
// its node, a DEV; the middle of the key is the member's sysfs name with
// every non-alphanumeric character turned into '_'. Members are returned in
// slot order, spares after them.
func parseDetailExport(out []byte) (detail, error) {
	var d detail
	members := map[string]*member{}
	var order []string
	get := func(key string) *member {
		m, ok := members[key]
		if !ok {
			m = &member{role: -1}
			members[key] = m
			order = append(order, key)
		}
		return m
	}
	seenLevel, seenDevices := false, false
	for n, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return detail{}, fmt.Errorf("mdadm --detail --export line %d: no KEY=value: %q", n+1, line)
		}
		switch {
		case key == "MD_LEVEL":
			d.level = strings.TrimPrefix(value, "raid")
			seenLevel = true
		case key == "MD_DEVICES":
			v, err := strconv.Atoi(value)
			if err != nil || v < 0 {
				return detail{}, fmt.Errorf("mdadm --detail --export: bad MD_DEVICES %q", value)
			}
			d.raidDevices = v
			seenDevices = true
		case key == "MD_METADATA":
			d.metadata = value
		case key == "MD_UUID":
			u, err := NormalizeUUID(value)
			if err != nil {
				return detail{}, fmt.Errorf("mdadm --detail --export: %w", err)
			}
			d.uuid = u
		case key == "MD_DEVNAME":
			d.devName = value
		case key == "MD_NAME":
			d.name = value
		case strings.HasPrefix(key, "MD_DEVICE_") && strings.HasSuffix(key, "_ROLE"):
			m := get(strings.TrimSuffix(strings.TrimPrefix(key, "MD_DEVICE_"), "_ROLE"))
			if r, err := strconv.Atoi(value); err == nil && r >= 0 {
				m.role = r
			} else if err == nil {
				return detail{}, fmt.Errorf("mdadm --detail --export: bad %s %q", key, value)
			}
		case strings.HasPrefix(key, "MD_DEVICE_") && strings.HasSuffix(key, "_DEV"):
			get(strings.TrimSuffix(strings.TrimPrefix(key, "MD_DEVICE_"), "_DEV")).dev = value
		}
	}
	if !seenLevel || !seenDevices {
		return detail{}, fmt.Errorf("mdadm --detail --export: no MD_LEVEL or MD_DEVICES in %q", out)
	}

	var active []*member
	for _, k := range order {
		m := members[k]
		if m.dev == "" {
			continue // no device node found by mdadm: nothing we can name
		}
		if m.role >= 0 {
			active = append(active, m)
		} else {
			d.spares = append(d.spares, m.dev)
		}
	}
	slices.SortStableFunc(active, func(a, b *member) int { return a.role - b.role })
	for _, m := range active {
		d.devices = append(d.devices, m.dev)
	}
	return d, nil
}

// arrayName is the array's short name: MD_DEVNAME, or MD_NAME without its
// "homehost:" prefix.
func (d detail) arrayName() string {
	if d.devName != "" {
		return d.devName
	}
	if _, name, ok := strings.Cut(d.name, ":"); ok {
		return name
	}
	return d.name
}

// scanEntry is one line of "mdadm --detail --scan" or "--examine --scan".
type scanEntry struct {
	device   string // /dev/md/<name> or /dev/mdN
	inactive bool
	uuid     string
	name     string // "homehost:name" as stored in the superblock
	// numDevices and devices are given by --examine --scan --verbose
	// only: the array's slot count, and the member devices present
	// (spares among them, whose count a continuation line gives).
	numDevices int
	spares     int
	devices    []string
}

// shortName is the entry's name without the homehost.
func (e scanEntry) shortName() string {
	if _, n, ok := strings.Cut(e.name, ":"); ok {
		return n
	}
	if e.name != "" {
		return e.name
	}
	if n, ok := strings.CutPrefix(e.device, "/dev/md/"); ok {
		return n
	}
	return ""
}

// parseScan parses "mdadm --detail --scan" and "mdadm --examine --scan":
//
//	ARRAY /dev/md/tc-origin metadata=1.2 name=any:tc-origin UUID=3b2a4c1e:8f0d2b6a:5c7e9d10:2f4a6b8c
//	INACTIVE-ARRAY /dev/md127 metadata=1.2 name=any:tc-cache UUID=...
//
// With --verbose, ARRAY lines carry num-devices= and each is followed by
// a continuation line with the member devices present:
//
//	ARRAY /dev/md/tc-origin level=raid10 metadata=1.2 num-devices=4 UUID=... name=any:tc-origin
//	   devices=/dev/vda,/dev/vdb,/dev/vdc
//
// Values may be quoted (mdadm quotes names holding spaces or quotes).
// Other lines (messages) are skipped.
func parseScan(out []byte) ([]scanEntry, error) {
	var entries []scanEntry
	for n, line := range strings.Split(string(out), "\n") {
		f := splitQuoted(line)
		if len(f) > 0 && len(entries) > 0 && strings.HasPrefix(line, " ") {
			last := &entries[len(entries)-1]
			for _, tok := range f {
				k, v, _ := strings.Cut(tok, "=")
				switch {
				case k == "devices" && v != "":
					last.devices = strings.Split(v, ",")
				case k == "spares":
					if n, err := strconv.Atoi(v); err == nil {
						last.spares = n
					}
				}
			}
			continue
		}
		if len(f) < 2 || (f[0] != "ARRAY" && f[0] != "INACTIVE-ARRAY") {
			continue
		}
		e := scanEntry{device: f[1], inactive: f[0] == "INACTIVE-ARRAY"}
		for _, tok := range f[2:] {
			k, v, ok := strings.Cut(tok, "=")
			if !ok {
				continue
			}
			switch k {
			case "UUID":
				u, err := NormalizeUUID(v)
				if err != nil {
					return nil, fmt.Errorf("mdadm scan line %d: %w", n+1, err)
				}
				e.uuid = u
			case "name":
				e.name = v
			case "num-devices":
				d, err := strconv.Atoi(v)
				if err != nil {
					return nil, fmt.Errorf("mdadm scan line %d: num-devices %q: %w", n+1, v, err)
				}
				e.numDevices = d
			}
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// splitQuoted splits s at white space, keeping quoted parts (which may
// hold white space) together and dropping the quotes. mdadm quotes with
// either ' or ", switching to the other to print one of them.
func splitQuoted(s string) []string {
	var fields []string
	var cur strings.Builder
	var quote rune // the open quote, or 0
	inField := false
	for _, r := range s {
		switch {
		case quote == 0 && (r == '"' || r == '\''):
			quote = r
			inField = true
		case quote != 0 && r == quote:
			quote = 0
		case quote == 0 && (r == ' ' || r == '\t'):
			if inField {
				fields = append(fields, cur.String())
				cur.Reset()
				inField = false
			}
		default:
			cur.WriteRune(r)
			inField = true
		}
	}
	if inField {
		fields = append(fields, cur.String())
	}
	return fields
}
