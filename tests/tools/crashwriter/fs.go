// SPDX-License-Identifier: Apache-2.0

package main

// The fs workload: files in a directory of a mounted filesystem, changed by
// a seeded random mix of the ways applications make data durable (see
// fsmodel.go for the operations), one at a time, each acknowledged only
// after its last syscall returned. On ext4 and XFS the journal commits
// (PREFLUSH|FUA, which device-mapper splits into a flush and a FUA-only
// write) and the O_DIRECT|O_DSYNC overwrites (FUA-only) are the writes a
// cache that ignores FUA loses.
//
//	crashwriter fs write  -dir D -ack /dev/ttyS1 -tag T -cycle N
//	crashwriter fs verify -dir D -acks LOG -tag T -cycle N
//
// Ack lines: "<tag> <cycle> <seq> <kind> <slot> <off> <n>".

import (
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

type fsFlags struct {
	dir, ack, acks, tag string
	cycle               uint64
}

func (f *fsFlags) parse(name string, args []string, needAck bool) error {
	fl := flag.NewFlagSet(name, flag.ExitOnError)
	fl.StringVar(&f.dir, "dir", "", "directory of the workload (created by write)")
	fl.StringVar(&f.tag, "tag", "", "workload tag on every ack line")
	fl.Uint64Var(&f.cycle, "cycle", 0, "cycle number (with the tag, the seed)")
	if needAck {
		fl.StringVar(&f.ack, "ack", "", "device or file receiving acknowledgements")
	} else {
		fl.StringVar(&f.acks, "acks", "", "ack log recorded by the host")
	}
	_ = fl.Parse(args)
	if f.dir == "" || f.tag == "" || (needAck && f.ack == "") || (!needAck && f.acks == "") {
		return fmt.Errorf("%s needs -dir, -tag and %s", name, map[bool]string{true: "-ack", false: "-acks"}[needAck])
	}
	return nil
}

func (f *fsFlags) seed() uint64 {
	h := fnv.New64a()
	h.Write([]byte(f.tag))
	return h.Sum64() ^ f.cycle*0x9e3779b97f4a7c15
}

func fsWrite(args []string) error {
	var fl fsFlags
	if err := fl.parse("fs write", args, true); err != nil {
		return err
	}
	a, err := openAcker(fl.ack, fl.tag, fl.cycle)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := os.MkdirAll(fl.dir, 0o755); err != nil {
		return err
	}
	// The directory itself is durable before the first operation, whose
	// acknowledgement therefore covers it.
	if err := fsyncPath(fl.dir); err != nil {
		return err
	}
	if err := fsyncPath(filepath.Dir(fl.dir)); err != nil {
		return err
	}
	buf, err := alignedBuffer(fsMaxBlocks * fsBlock)
	if err != nil {
		return err
	}
	var m fsModel
	g := newFSGen(fl.seed())
	w := fsWriter{dir: fl.dir, cycle: fl.cycle, buf: buf}
	for seq := uint64(0); ; seq++ {
		o := g.next(&m, seq)
		if err := w.do(o); err != nil {
			return fmt.Errorf("op %s: %w", o, err)
		}
		if err := a.ack("%s", o.ackFields()); err != nil {
			return err
		}
		m.apply(o)
	}
}

type fsWriter struct {
	dir   string
	cycle uint64
	buf   []byte
}

func (w *fsWriter) do(o fsOp) error {
	data := w.buf[:o.N*fsBlock]
	for i := 0; i < o.N; i++ {
		fillBlock(data[i*fsBlock:], w.cycle, o.Seq, o.Slot, o.Off+i)
	}
	path := filepath.Join(w.dir, fsName(o.Slot))
	off := int64(o.Off) * fsBlock
	switch o.Kind {
	case opCreate:
		return writeFile(path, os.O_CREATE|os.O_EXCL, data, 0, unix.Fsync, w.dir)
	case opAppend:
		return writeFile(path, 0, data, off, unix.Fsync, "")
	case opOverwrite:
		return writeFile(path, 0, data, off, unix.Fdatasync, "")
	case opDsync:
		return writeFile(path, unix.O_DSYNC, data, off, nil, "")
	case opDirect:
		return writeFile(path, unix.O_DIRECT|unix.O_DSYNC, data, off, nil, "")
	case opRename:
		tmp := path + ".tmp"
		if err := writeFile(tmp, os.O_CREATE|os.O_TRUNC, data, 0, unix.Fsync, ""); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		return fsyncPath(w.dir)
	}
	return fmt.Errorf("unknown op kind %q", o.Kind)
}

// writeFile opens path for writing with extra flags, writes data at off,
// calls sync on the fd if given, closes it and then fsyncs dir if given.
func writeFile(path string, flags int, data []byte, off int64, sync func(int) error, dir string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|flags, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, off); err != nil {
		f.Close()
		return err
	}
	if sync != nil {
		if err := retryEINTR(func() error { return sync(int(f.Fd())) }); err != nil {
			f.Close()
			return fmt.Errorf("sync %s: %w", path, err)
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if dir != "" {
		return fsyncPath(dir)
	}
	return nil
}

func fsyncPath(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := retryEINTR(func() error { return unix.Fsync(int(d.Fd())) }); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}

func retryEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// fsVerify replays the generator through the last acknowledged operation
// and checks every file against the model. The operation after it (in
// flight at the cut) may have happened, in part or in full.
func fsVerify(args []string) error {
	var fl fsFlags
	if err := fl.parse("fs verify", args, false); err != nil {
		return err
	}
	lines, err := readAcks(fl.acks, fl.tag, fl.cycle)
	if err != nil {
		return err
	}
	var m fsModel
	g := newFSGen(fl.seed())
	for i, l := range lines {
		o := g.next(&m, uint64(i))
		if got := strings.Join(l, " "); got != o.ackFields() {
			return fmt.Errorf("ack %d is %v, the generator says %s: not this workload's log", i, l, o)
		}
		m.apply(o)
	}
	acked := len(lines)
	inflight := g.next(&m, uint64(acked))
	if acked == 0 {
		fmt.Printf("verified 0 acknowledged ops of %s cycle %d: 0 lost\n", fl.tag, fl.cycle)
		return nil
	}

	lost := map[uint64]bool{}
	var problems []string
	for s := range m {
		var in *fsOp
		if inflight.Slot == s {
			in = &inflight
		}
		p := checkFile(filepath.Join(fl.dir, fsName(s)), fl.cycle, s, m[s], in, lost)
		problems = append(problems, p...)
	}
	for i, p := range problems {
		if i == 20 {
			fmt.Printf("... %d more\n", len(problems)-20)
			break
		}
		fmt.Println("LOST", p)
	}
	var seqs []int
	for s := range lost {
		seqs = append(seqs, int(s))
	}
	sort.Ints(seqs)
	if len(seqs) > 0 {
		fmt.Printf("lost acknowledged ops: %v\n", seqs)
	}
	fmt.Printf("verified %d acknowledged ops of %s cycle %d: %d lost (in flight at the cut: %s)\n",
		acked, fl.tag, fl.cycle, len(lost), inflight)
	if len(problems) > 0 {
		return fmt.Errorf("%d acknowledged ops lost (%d problems)", len(lost), len(problems))
	}
	return nil
}

// checkFile compares one file with its model (want, nil if it must not
// exist), allowing the in-flight op (in, if it touches this file) to have
// happened in part or in full. It adds the seqs of acknowledged versions it
// cannot find to lost and returns what is wrong.
func checkFile(path string, cycle uint64, slot int, want []uint64, in *fsOp, lost map[uint64]bool) []string {
	data, err := os.ReadFile(path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return []string{fmt.Sprintf("%s: %v", path, err)}
	}
	missAll := func(why string) []string {
		for _, s := range want {
			lost[s] = true
		}
		return []string{fmt.Sprintf("%s: %s (acknowledged versions %v)", path, why, uniq(want))}
	}
	if in != nil && in.Kind == opRename {
		// Atomic: the old file or the new one, nothing in between.
		var next fsModel
		next[slot] = want
		next.apply(*in)
		if exists && len(matchBlocks(data, cycle, slot, next[slot], nil)) == 0 && len(data) == len(next[slot])*fsBlock {
			return nil
		}
		in = nil
	}
	if !exists {
		if want == nil {
			return nil
		}
		return missAll("missing")
	}
	if want == nil && (in == nil || in.Kind != opCreate) {
		return []string{fmt.Sprintf("%s: exists, no acknowledged or in-flight op created it", path)}
	}
	size := len(data)
	minSize, maxSize := len(want)*fsBlock, len(want)*fsBlock
	if in != nil && (in.Kind == opCreate || in.Kind == opAppend) {
		maxSize = (in.Off + in.N) * fsBlock // append: Off is the old size
		if in.Kind == opCreate {
			maxSize = in.N * fsBlock
		}
	}
	var problems []string
	if size < minSize || size > maxSize {
		problems = append(problems, fmt.Sprintf("%s: size %d, want %d..%d", path, size, minSize, maxSize))
		if size < minSize {
			for _, s := range want[size/fsBlock:] {
				lost[s] = true
			}
		}
	}
	for _, b := range matchBlocks(data, cycle, slot, want, in) {
		if b.blk >= len(want) {
			problems = append(problems, fmt.Sprintf("%s block %d: %s", path, b.blk, b.why))
			continue
		}
		lost[want[b.blk]] = true
		problems = append(problems, fmt.Sprintf("%s block %d: %s, want version %d", path, b.blk, b.why, want[b.blk]))
	}
	return problems
}

type blockProblem struct {
	blk int
	why string
}

// matchBlocks checks the whole blocks of data present in want against it;
// blocks the in-flight op writes may also hold its version (or zeros, past
// the old end of the file).
func matchBlocks(data []byte, cycle uint64, slot int, want []uint64, in *fsOp) []blockProblem {
	var out []blockProblem
	for b := 0; (b+1)*fsBlock <= len(data); b++ {
		seq, why := readBlock(data[b*fsBlock:(b+1)*fsBlock], cycle, slot, b)
		touched := in != nil && b >= in.Off && b < in.Off+in.N
		switch {
		case why != "":
		case touched && (seq == in.Seq || (seq == blockZero && b >= len(want))):
			continue
		case b >= len(want):
			why = "block past the acknowledged end of file"
		case seq == want[b]:
			continue
		case seq == blockZero:
			why = "zeros"
		default:
			why = "version " + strconv.FormatUint(seq, 10)
		}
		out = append(out, blockProblem{b, why})
	}
	return out
}

func uniq(v []uint64) []uint64 {
	var out []uint64
	for i, s := range v {
		if i == 0 || s != v[i-1] {
			out = append(out, s)
		}
	}
	return out
}
