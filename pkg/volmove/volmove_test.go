// SPDX-License-Identifier: Apache-2.0

package volmove_test

import (
	"testing"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/volmove"
)

// TestWhyCalledOff: the reason a waiter prints for a move that will not
// happen comes from the spec's record for that target first: the owner's
// status carries it only until its next pass.
func TestWhyCalledOff(t *testing.T) {
	recorded := &api.CalledOffMove{To: "b", Why: "move to node b refused at the handover"}
	for _, tc := range []struct {
		name string
		spec api.VolumeSpec
		st   api.VolumeStatus
		want string
	}{
		{"recorded for this target", api.VolumeSpec{Node: "a", MoveCalledOff: recorded}, api.VolumeStatus{Error: "mirror degraded"}, recorded.Why},
		{"recorded for another target", api.VolumeSpec{Node: "a", MoveCalledOff: &api.CalledOffMove{To: "c", Why: "c lost"}}, api.VolumeStatus{Error: "mirror degraded"}, "mirror degraded"},
		{"only the status says", api.VolumeSpec{Node: "a"}, api.VolumeStatus{Error: "move to node b refused"}, "move to node b refused"},
		{"another move asked since", api.VolumeSpec{Node: "a", MoveTo: "c"}, api.VolumeStatus{}, "a move to node c was asked for since"},
		{"nothing says", api.VolumeSpec{Node: "a"}, api.VolumeStatus{}, "the move was called off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !volmove.CalledOff(tc.spec, "b") {
				t.Fatalf("CalledOff(%+v, b) = false", tc.spec)
			}
			if got := volmove.WhyCalledOff(tc.spec, tc.st, "b"); got != tc.want {
				t.Errorf("WhyCalledOff = %q, want %q", got, tc.want)
			}
		})
	}
}
