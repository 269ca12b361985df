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
// run) is printed too, as "did not finish".
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
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
// from its end, and returns how many tests it printed.
func digest(r io.Reader, w io.Writer, head, tail int) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var cur *testOutput
	printed := 0
	for sc.Scan() {
		line := sc.Text()
		if name, ok := topLevelRun(line); ok {
			if cur != nil && cur.name != name {
				// A test whose result line never came (the package's
				// binary died): the next one starts.
				cur.print(w, "did not finish", head, tail)
				printed++
			}
			if cur == nil || cur.name != name {
				cur = &testOutput{name: name}
			}
			continue
		}
		if cur == nil {
			continue
		}
		if name, result, ok := topLevelResult(line); ok && name == cur.name {
			if result != "PASS" && result != "SKIP" {
				cur.print(w, line, head, tail)
				printed++
			}
			cur = nil
			continue
		}
		if isInfoLog(line) {
			continue
		}
		cur.lines = append(cur.lines, line)
	}
	if err := sc.Err(); err != nil {
		return printed, err
	}
	if cur != nil {
		cur.print(w, "did not finish (the log ends)", head, tail)
		printed++
	}
	return printed, nil
}

// testOutput is what one top-level test printed so far.
type testOutput struct {
	name  string
	lines []string
}

// print writes the test's header and its first head and last tail lines,
// with a marker for what was left out between them.
func (t *testOutput) print(w io.Writer, result string, head, tail int) {
	fmt.Fprintf(w, "=== %s: %s\n", t.name, result)
	if len(t.lines) <= head+tail {
		for _, l := range t.lines {
			fmt.Fprintln(w, l)
		}
		return
	}
	for _, l := range t.lines[:head] {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintf(w, "    [… %d lines left out: the whole log is in the file …]\n", len(t.lines)-head-tail)
	for _, l := range t.lines[len(t.lines)-tail:] {
		fmt.Fprintln(w, l)
	}
}

// topLevelRun reports the test a "=== RUN   TestX" line starts; subtests
// (TestX/sub) belong to their parent and are not reported.
func topLevelRun(line string) (string, bool) {
	name, ok := strings.CutPrefix(line, "=== RUN   ")
	if !ok || strings.Contains(name, "/") {
		return "", false
	}
	return name, true
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
