package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/idmint/idmint/testkit/drill"
)

// stream is go test -json of one test that printed lines and ended so.
func stream(t *testing.T, action string, lines ...string) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, l := range lines {
		enc.Encode(event{Action: "output", Package: "p", Test: "TestDrill", Output: l + "\n"})
	}
	enc.Encode(event{Action: action, Package: "p", Test: "TestDrill"})
	return b.String()
}

func report(t *testing.T, verdict string) string {
	t.Helper()
	var b strings.Builder
	if err := drill.Write(&b, &drill.Report{Drill: "far", Test: "TestDrill", Verdict: verdict, Figures: map[string]any{"ids": 1}}); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(b.String())
}

// TestSummarise_LongLine: a report test2json cut into several output
// events (it cuts long lines) is read whole.
func TestSummarise_LongLine(t *testing.T) {
	var b strings.Builder
	big := map[string]any{}
	for i := range 500 {
		big[strings.Repeat("k", 20)+string(rune('a'+i%26))+strings.Repeat("x", i%7)] = i
	}
	if err := drill.Write(&b, &drill.Report{Drill: "regions", Test: "TestDrill", Verdict: "ok", Figures: big}); err != nil {
		t.Fatal(err)
	}
	line := b.String()
	var in strings.Builder
	enc := json.NewEncoder(&in)
	for len(line) > 0 {
		n := min(len(line), 1000)
		enc.Encode(event{Action: "output", Package: "p", Test: "TestDrill", Output: line[:n]})
		line = line[n:]
	}
	enc.Encode(event{Action: "pass", Package: "p", Test: "TestDrill"})
	s := summarise(strings.NewReader(in.String()), io.Discard, false)
	if len(s.reports) != 1 || s.verdict(io.Discard, nil, 1) != 0 {
		t.Fatalf("%d reports from a line in pieces, want 1", len(s.reports))
	}
}

// TestVerdict: a drill passes only with its reports all ok; one that
// skipped (no report), a FAIL report or a failed test fails, whatever the
// log says.
func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int
	}{
		{"ok", stream(t, "pass", "drill-far: all fine", report(t, "ok")), 0},
		{"skipped", stream(t, "skip", "drill-far: 0 errors, 0 duplicates"), 1},
		{"run failed", stream(t, "pass", report(t, "FAIL")), 1},
		{"test failed", stream(t, "fail", report(t, "ok")), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := summarise(strings.NewReader(tc.in), io.Discard, false)
			if got := s.verdict(io.Discard, nil, 1); got != tc.want {
				t.Fatalf("status %d, want %d (reports %d, failed %v)", got, tc.want, len(s.reports), s.failed)
			}
		})
	}
}
