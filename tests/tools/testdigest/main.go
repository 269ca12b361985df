// SPDX-License-Identifier: Apache-2.0

// Command testdigest prints, for each test that failed in a `go test -v`
// log, the start and the end of what it printed, without the daemons'
// INFO logs. The VM suite logs tens of thousands of lines; a plain tail
// of the log shows only the last failure, and of a long one only its
// last screen (an fio report, say), not the line that says what failed.
//
//	testdigest [-head N] [-tail N] LOG
//
// A test still running when the log ends (a timeout's panic, a killed
// run) is printed too, as "did not finish". Last come the test's own
// lines (t.Log, t.Error, t.Fatal) from the part left out: a failure's
// message often sits between a long narrative and the dumps of its
// VMs, and what reads a CI run keeps the end of its output.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

func main() {
	head := flag.Int("head", 40, "lines to print from the start of each failed test's output")
	tail := flag.Int("tail", 40, "lines to print from the end of each failed test's output")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: testdigest [-head N] [-tail N] LOG\n\nPrints the start and the end of each failed test's output in a `go test -v` log.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "testdigest: %v\n", err)
		os.Exit(1)
	}
	defer f.Close()
	failures, err := digest(f, os.Stdout, *head, *tail)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testdigest: read %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
	if failures == 0 {
		fmt.Println("testdigest: no failed test in the log")
	}
}

// digest copies to w the output of every failed (or unfinished) top-level
// test in the go test -v log r, at most head lines from its start and tail
// from its end, and returns how many tests it printed. Tests that run in
// parallel interleave their output; the log's "=== CONT" and "=== NAME"
// lines say whose lines follow.
func digest(r io.Reader, w io.Writer, head, tail int) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	tests := map[string]*testOutput{}
	var order []string
	var cur *testOutput
	var cut []*testOutput // printed with lines left out
	printed := 0
	show := func(t *testOutput, result string) {
		if t.print(w, result, head, tail) {
			cut = append(cut, t)
		}
		printed++
	}
	for sc.Scan() {
		line := sc.Text()
		if kind, name, ok := marker(line); ok {
			top, _, sub := strings.Cut(name, "/")
			t := tests[top]
			if kind == "RUN" && !sub && t == nil {
				// A new top-level test: one still running that was
				// not paused for parallel running never finished (the
				// package's binary died).
				for _, n := range order {
					if o := tests[n]; !o.done && !o.paused {
						o.done = true
						show(o, "did not finish")
					}
				}
			}
			if t == nil {
				t = &testOutput{name: top}
				tests[top] = t
				order = append(order, top)
			}
			switch {
			case kind == "PAUSE" && !sub:
				t.paused = true
			case kind == "CONT" && !sub:
				t.paused = false
			}
			cur = t
			if sub && kind == "RUN" {
				t.lines = append(t.lines, line)
			}
			continue
		}
		if name, result, ok := topLevelResult(line); ok {
			if t := tests[name]; t != nil && !t.done {
				t.done = true
				if result != "PASS" && result != "SKIP" {
					show(t, line)
				}
			}
			cur = nil
			continue
		}
		if cur == nil || cur.done || isInfoLog(line) {
			continue
		}
		cur.lines = append(cur.lines, line)
	}
	if err := sc.Err(); err != nil {
		return printed, err
	}
	for _, n := range order {
		if t := tests[n]; !t.done {
			show(t, "did not finish (the log ends)")
		}
	}
	for _, t := range cut {
		t.printOwnLeftOut(w, head, tail)
	}
	return printed, nil
}

// testOutput is what one top-level test printed so far.
type testOutput struct {
	name   string
	lines  []string
	paused bool // waiting to run in parallel (=== PAUSE, no CONT yet)
	done   bool // its result line came, or it was printed unfinished
}

// print writes the test's header and its first head and last tail lines,
// with a marker for what was left out between them; it reports whether
// it left lines out.
func (t *testOutput) print(w io.Writer, result string, head, tail int) bool {
	fmt.Fprintf(w, "=== %s: %s\n", t.name, result)
	if len(t.lines) <= head+tail {
		for _, l := range t.lines {
			fmt.Fprintln(w, l)
		}
		return false
	}
	for _, l := range t.lines[:head] {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintf(w, "    [… %d lines left out: the whole log is in the file …]\n", len(t.lines)-head-tail)
	for _, l := range t.lines[len(t.lines)-tail:] {
		fmt.Fprintln(w, l)
	}
	return true
}

// ownLine matches a line a test printed itself through t.Log, t.Error or
// t.Fatal ("    move_test.go:150: ..."), not the harness's dumps
// (testing.go) or a VM's console.
var ownLine = regexp.MustCompile(`^\s+\w+_test\.go:\d+: `)

const (
	// ownLinesKept is how many of a test's own left-out lines are
	// printed at the end: the last ones, nearest its failure.
	ownLinesKept = 12
	// continuationKept is how many lines of a multi-line message (a
	// command's output in a t.Fatalf) follow its first line.
	continuationKept = 6
	// lineWidth cuts long lines (a struct printed with %+v).
	lineWidth = 400
)

// printOwnLeftOut writes the test's own lines (with the first lines of a
// multi-line message) from the part print left out, the last
// ownLinesKept of them.
func (t *testOutput) printOwnLeftOut(w io.Writer, head, tail int) {
	middle := t.lines[head : len(t.lines)-tail]
	var msgs [][]string
	for i := 0; i < len(middle); i++ {
		if !ownLine.MatchString(middle[i]) {
			continue
		}
		msg := []string{middle[i]}
		indent := len(middle[i]) - len(strings.TrimLeft(middle[i], " \t"))
		for i+1 < len(middle) && len(msg) <= continuationKept && !ownLine.MatchString(middle[i+1]) &&
			strings.HasPrefix(middle[i+1], strings.Repeat(" ", indent+4)) {
			i++
			msg = append(msg, middle[i])
		}
		msgs = append(msgs, msg)
	}
	if len(msgs) == 0 {
		return
	}
	fmt.Fprintf(w, "=== %s: its own lines from the part left out above, the last %d:\n", t.name, min(len(msgs), ownLinesKept))
	for _, msg := range msgs[max(0, len(msgs)-ownLinesKept):] {
		for _, l := range msg {
			if len(l) > lineWidth {
				l = l[:lineWidth] + " …"
			}
			fmt.Fprintln(w, l)
		}
	}
}

// marker parses the lines go test -v writes before a test's output: RUN,
// PAUSE, CONT or NAME (whose output follows), and the test's name, which
// is a subtest's when it has a slash.
func marker(line string) (kind, name string, ok bool) {
	rest, ok := strings.CutPrefix(line, "=== ")
	if !ok {
		return "", "", false
	}
	kind, name, ok = strings.Cut(rest, " ")
	if !ok || (kind != "RUN" && kind != "PAUSE" && kind != "CONT" && kind != "NAME") {
		return "", "", false
	}
	return kind, strings.TrimSpace(name), true
}

// topLevelResult parses a top-level result line, "--- FAIL: TestX (1.23s)";
// a subtest's result is indented and is not one.
func topLevelResult(line string) (name, result string, ok bool) {
	rest, ok := strings.CutPrefix(line, "--- ")
	if !ok {
		return "", "", false
	}
	result, rest, ok = strings.Cut(rest, ": ")
	if !ok {
		return "", "", false
	}
	name, _, _ = strings.Cut(rest, " ")
	return name, result, true
}

// isInfoLog reports a structured INFO log line (log/slog's text format)
// from a daemon or the engine: the narrative of a run, not a failure.
func isInfoLog(line string) bool {
	return strings.Contains(line, " level=INFO ")
}
