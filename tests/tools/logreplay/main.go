// SPDX-License-Identifier: Apache-2.0

// Command logreplay reads a dm-log-writes log and writes the state of the
// logged device at one of its marks onto another device, to model a drive
// that lost its volatile write cache at that moment.
//
//	logreplay list   -log L
//	logreplay replay -log L -dev D -mark NAME [-volatile] [-zero]
//
// list prints every entry (index, flags, sector, blocks) and the marks.
// replay writes onto D, in log order, every write logged before the mark.
// With -volatile it keeps only what a drive with a volatile write cache
// had made durable at the mark: everything up to and including the last
// FLUSH before the mark, and after that flush only FUA writes. Discards
// are applied as zeroes: the device the log started from was zeroed, and
// zeroes are what most SSDs return for discarded blocks; a stack that
// still needed discarded data then reads zeroes, which a verifier sees.
// -zero zeroes all of D first (the logs in the tests start from zeroed
// disks, and a replay target may hold an earlier replay).
//
// The 6.1 target itself holds plain writes until the next FLUSH completes
// and logs them just before it (log.go), so a log it wrote has no plain
// write between the last FLUSH and a mark: -volatile then drops nothing,
// and says so. The rule is applied anyway, and tested, so that the cut
// does not depend on that ordering.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "list":
		err = list(os.Args[2:], os.Stdout)
	case "replay":
		err = replay(os.Args[2:], os.Stdout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "logreplay:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: logreplay list -log L\n       logreplay replay -log L -dev D -mark NAME [-volatile] [-zero]")
	os.Exit(2)
}

// openLog opens and parses a log; the caller closes the file.
func openLog(path string) (*os.File, *Log, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	dropCache(f)
	l, err := ReadLog(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, l, nil
}

// dropCache drops the page cache of a block device: the target wrote the
// log and the stack wrote the data disks with bios that bypass it, so
// pages read earlier (a superblock scan) would be stale. A no-op on files.
func dropCache(f *os.File) {
	_ = unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0)
}

func list(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("list", flag.ExitOnError)
	logPath := fs.String("log", "", "log device or file")
	_ = fs.Parse(args)
	if *logPath == "" {
		return errors.New("list needs -log")
	}
	f, l, err := openLog(*logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(w, "sectorsize %d, %d entries\n", l.SectorSize, len(l.Entries))
	var marks []string
	for _, e := range l.Entries {
		if e.is(FlagMark) {
			fmt.Fprintf(w, "%7d MARK %s\n", e.Index, e.Mark)
			marks = append(marks, e.Mark)
			continue
		}
		fmt.Fprintf(w, "%7d %-14s sector %d +%d\n", e.Index, e.FlagString(), e.Sector, e.NrSectors)
	}
	fmt.Fprintf(w, "marks: %s\n", strings.Join(marks, " "))
	return nil
}

func replay(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ExitOnError)
	logPath := fs.String("log", "", "log device or file")
	dev := fs.String("dev", "", "device or file to write the state onto")
	mark := fs.String("mark", "", "name of the mark to stop at")
	volatile := fs.Bool("volatile", false, "keep only what a FLUSH or a FUA write made durable by the mark")
	zero := fs.Bool("zero", false, "zero the whole target first")
	_ = fs.Parse(args)
	if *logPath == "" || *dev == "" || *mark == "" {
		return errors.New("replay needs -log, -dev and -mark")
	}
	lf, l, err := openLog(*logPath)
	if err != nil {
		return err
	}
	defer lf.Close()
	at, err := l.FindMark(*mark)
	if err != nil {
		return err
	}
	c, err := l.CutAt(at, *volatile)
	if err != nil {
		return err
	}
	df, err := os.OpenFile(*dev, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer df.Close()
	dropCache(df)
	if *zero {
		size, err := df.Seek(0, io.SeekEnd)
		if err != nil {
			return err
		}
		if err := zeroRange(df, 0, size); err != nil {
			return fmt.Errorf("zero %s: %w", *dev, err)
		}
	}
	ss := int64(l.SectorSize)
	var writes, discards int
	var buf []byte
	for _, e := range c.Entries {
		off, n := int64(e.Sector)*ss, int64(e.NrSectors)*ss
		if e.is(FlagDiscard) {
			if err := zeroRange(df, off, n); err != nil {
				return fmt.Errorf("entry %d: discard: %w", e.Index, err)
			}
			discards++
			continue
		}
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		if _, err := lf.ReadAt(buf[:n], e.DataOff); err != nil {
			return fmt.Errorf("entry %d: read data: %w", e.Index, err)
		}
		if _, err := df.WriteAt(buf[:n], off); err != nil {
			return fmt.Errorf("entry %d: write: %w", e.Index, err)
		}
		writes++
	}
	if err := df.Sync(); err != nil {
		return err
	}
	dropCache(df)
	var fua int
	for _, e := range c.Entries {
		if e.Index > c.LastFlush && e.is(FlagFUA) {
			fua++
		}
	}
	mode := "all entries before the mark"
	if *volatile {
		mode = fmt.Sprintf("volatile: through the last FLUSH (entry %d), then %d FUA writes; %d writes/discards dropped", c.LastFlush, fua, len(c.Dropped))
	}
	fmt.Fprintf(w, "replayed mark %s (entry %d of %d) onto %s: %d writes, %d discards (%s)\n",
		*mark, at, len(l.Entries), *dev, writes, discards, mode)
	return nil
}

// zeroRange zeroes n bytes at off: BLKZEROOUT on a block device (the
// device may do it without data transfer), plain writes otherwise.
func zeroRange(f *os.File, off, n int64) error {
	if n == 0 {
		return nil
	}
	r := [2]uint64{uint64(off), uint64(n)}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKZEROOUT, uintptr(unsafe.Pointer(&r))); errno == 0 {
		return nil
	}
	z := make([]byte, 1<<20)
	for n > 0 {
		k := min(n, int64(len(z)))
		if _, err := f.WriteAt(z[:k], off); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}
