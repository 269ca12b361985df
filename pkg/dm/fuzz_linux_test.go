// SPDX-License-Identifier: Apache-2.0

//go:build linux

package dm

import "testing"

// FuzzDecodeReply feeds arbitrary kernel replies to the payload decoders:
// they must fail cleanly, never panic or loop.
func FuzzDecodeReply(f *testing.F) {
	f.Add([]byte(nameList(true, true, Device{Name: "a", Major: 253, UUID: "u"}, Device{Name: "bb", Minor: 1})), uint32(2))
	f.Add([]byte(statusReply(Target{Length: 8, Type: "linear"}, Target{Start: 8, Length: 8, Type: "zero", Params: "x"})), uint32(2))
	f.Add(make([]byte, 305), uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, count uint32) {
		_, _ = decodeNameList(b)
		_, _ = decodeTargetVersions(b)
		_, _ = decodeTargets(b, count%64)
		_, _ = decodeMessageReply(b, ^uint32(0))
		if h, err := unmarshalHeader(b); err == nil {
			_, _ = replyData(b, h)
			_ = deviceInfo(h)
		}
	})
}
