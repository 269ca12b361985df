// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// proc is a process that has a device open.
type proc struct {
	pid  int
	comm string // /proc/<pid>/comm, "?" if it could not be read
}

func (p proc) String() string { return fmt.Sprintf("%d (%s)", p.pid, p.comm) }

// openedBy returns the first member some process has open, and those
// processes, sorted by pid; no processes when none has. It reads every
// <procRoot>/<pid>/fd/* and stats it: the kernel resolves the link to the
// open file itself, so a block device is matched by its device number
// whatever node it was opened through (another mount namespace, a
// /dev/disk/by-id link), and any other file by being the same inode as
// the member's node (which is how the tests' fake trees match).
//
// The calling process is left out, as are processes that exit during the
// scan or whose fds cannot be read (not root: the exclusive open that
// follows, and the open for writing, fail anyway).
func (c Checker) openedBy(members []member) (member, []proc) {
	type inode struct{ dev, ino uint64 }
	nodes := make([]inode, len(members))
	for i, m := range members {
		var st unix.Stat_t
		if err := unix.Stat(m.path, &st); err == nil {
			nodes[i] = inode{st.Dev, st.Ino}
		}
	}
	root := procRootOrDefault(c.ProcRoot)
	entries, err := os.ReadDir(root)
	if err != nil {
		return member{}, nil
	}
	self := os.Getpid()
	found := make([][]proc, len(members))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		fdDir := filepath.Join(root, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		hit := make([]bool, len(members))
		for _, fd := range fds {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(fdDir, fd.Name()), &st); err != nil {
				continue
			}
			isBlk := st.Mode&unix.S_IFMT == unix.S_IFBLK
			rdev := uint64(st.Rdev)
			for i, m := range members {
				if isBlk && (devNum{unix.Major(rdev), unix.Minor(rdev)}) == m.num ||
					!isBlk && nodes[i] != (inode{}) && (inode{st.Dev, st.Ino}) == nodes[i] {
					hit[i] = true
				}
			}
		}
		for i, h := range hit {
			if h {
				found[i] = append(found[i], proc{pid: pid, comm: readComm(root, e.Name())})
			}
		}
	}
	// Partitions first, as for the exclusive open: the partition's name is
	// the better reason.
	for i := len(members) - 1; i >= 0; i-- {
		if len(found[i]) > 0 {
			slices.SortFunc(found[i], func(a, b proc) int { return a.pid - b.pid })
			return members[i], found[i]
		}
	}
	return member{}, nil
}

func readComm(procRoot, pid string) string {
	raw, err := os.ReadFile(filepath.Join(procRoot, pid, "comm"))
	if s := strings.TrimSpace(string(raw)); err == nil && s != "" {
		return s
	}
	return "?"
}

// describeProcs says "process 812 (mysqld)" or "processes 812 (mysqld),
// 900 (qemu-system-x86)", naming at most five.
func describeProcs(ps []proc) string {
	if len(ps) == 1 {
		return "process " + ps[0].String()
	}
	var names []string
	for i, p := range ps {
		if i == 5 {
			names = append(names, fmt.Sprintf("and %d more", len(ps)-5))
			break
		}
		names = append(names, p.String())
	}
	return "processes " + strings.Join(names, ", ")
}
