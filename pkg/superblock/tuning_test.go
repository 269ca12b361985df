package superblock

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/pool"
)

// TestTuningRoundTrip checks that a volume's write-tier tuning survives the
// superblock, since boot assembly rebuilds the table from it, and that a
// volume without tuning writes no tuning key at all.
func TestTuningRoundTrip(t *testing.T) {
	l := testLayout(t)
	if len(l.Volumes) == 0 {
		t.Fatal("test layout has no volume")
	}
	hi, lo, jobs := 30, 20, uint64(64)
	if err := l.SetTuning(l.Volumes[0].Name, &pool.Tuning{HighWatermark: &hi, LowWatermark: &lo, WritebackJobs: &jobs}); err != nil {
		t.Fatal(err)
	}
	sb := ssdSB(l)
	img := mustEncode(t, sb)
	if !strings.Contains(string(payloadOf(img)), `"tuning":{"high_watermark":30,"low_watermark":20,"writeback_jobs":64}`) {
		t.Errorf("tuning not in the payload as documented:\n%s", payloadOf(img))
	}
	got, err := Decode(img)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sb) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got.Layout.Volumes[0].Tuning, sb.Layout.Volumes[0].Tuning)
	}
	if err := l.SetTuning(l.Volumes[0].Name, nil); err != nil {
		t.Fatal(err)
	}
	if p := string(payloadOf(mustEncode(t, ssdSB(l)))); strings.Contains(p, "tuning") {
		t.Errorf("untuned volume writes a tuning key:\n%s", p)
	}
}
