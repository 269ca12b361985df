// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"flag"
	"testing"
)

// allCases runs the cases .ci/run leaves out of the scenarios it trims for
// its time budget (docs/testing.md): TestNetworkPartition's four longest
// or most redundant cuts, TestMoveWarm's power cut as the old owner stops
// the volume and TestLogWritesReplay's second mark of each kind. make
// test-vm-all and make test-partition pass it.
var allCases = flag.Bool("all-cases", false, "run every case of the scenarios .ci/run trims (make test-vm-all, make test-partition)")

// inFullRunOnly runs case name of t with fn only under -all-cases, and
// otherwise logs that it was left out, so a CI log says what it skipped.
func inFullRunOnly(t *testing.T, name string, fn func()) {
	t.Helper()
	if !*allCases {
		t.Logf("case %q left to make test-vm-all (-all-cases)", name)
		return
	}
	fn()
}
