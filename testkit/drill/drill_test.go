package drill_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/drill"
)

// TestReport_RoundTrip: a report written is read back, durations in
// seconds; any other line is no report.
func TestReport_RoundTrip(t *testing.T) {
	r := &drill.Report{Drill: "far", Test: "TestDrillFar", Verdict: "ok", Figures: map[string]any{}}
	r.Set("p50_s", 1500*time.Millisecond)
	r.Set("ids", 42)
	var b bytes.Buffer
	if err := drill.Write(&b, r); err != nil {
		t.Fatal(err)
	}
	got, ok := drill.Parse(b.String())
	if !ok || got.Drill != "far" || got.Verdict != "ok" || got.Figures["p50_s"] != 1.5 || got.Figures["ids"] != float64(42) {
		t.Fatalf("read back %+v (%v) from %q", got, ok, b.String())
	}
	for _, line := range []string{"", "drill-far: p50 1ms", drill.Prefix + "{", drill.Prefix + `{"verdict":"ok"}`} {
		if _, ok := drill.Parse(line); ok {
			t.Errorf("%q read as a report", line)
		}
	}
}
