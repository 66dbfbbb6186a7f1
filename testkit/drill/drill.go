// Package drill writes a drill's results as data: each run of a drill test
// prints one Report as a JSON line that starts with Prefix, and the drill
// command (testkit/cmd/drill) runs `go test -json`, reads them back,
// prints them as a table and fails on any failed run or test. No make
// target reads a log line's wording.
//
//	r := drill.Start(t, "far") // written when t ends, with its verdict
//	r.Set("near_p50_s", p50)   // time.Duration values are written as seconds
package drill

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Prefix starts every report line.
const Prefix = "drill-report: "

// Report is one run of a drill.
type Report struct {
	Drill   string         `json:"drill"`   // far, failover, runway, ha
	Test    string         `json:"test"`    // the test (and subtest) that ran it
	Verdict string         `json:"verdict"` // ok or FAIL
	Figures map[string]any `json:"figures"` // what the run measured, by name
	mu      sync.Mutex
}

// Start returns the report of tb's run of the drill; it is written to
// stdout when tb ends, its verdict FAIL if tb failed, else ok.
func Start(tb testing.TB, name string) *Report {
	r := &Report{Drill: name, Test: tb.Name(), Figures: map[string]any{}}
	tb.Cleanup(func() {
		r.Verdict = "ok"
		if tb.Failed() {
			r.Verdict = "FAIL"
		}
		if err := Write(os.Stdout, r); err != nil {
			tb.Error(err)
		}
	})
	return r
}

// Set records a figure; a time.Duration is recorded in seconds.
func (r *Report) Set(name string, v any) {
	if d, ok := v.(time.Duration); ok {
		v = d.Seconds()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Figures[name] = v
}

// Write writes r to w as one line: Prefix, then r as JSON.
func Write(w io.Writer, r *Report) error {
	r.mu.Lock()
	b, err := json.Marshal(r)
	r.mu.Unlock()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s%s\n", Prefix, b)
	return err
}

// Parse reads a report from a line Write wrote; ok is false for any other
// line.
func Parse(line string) (r *Report, ok bool) {
	rest, found := strings.CutPrefix(strings.TrimSpace(line), Prefix)
	if !found {
		return nil, false
	}
	r = &Report{}
	if err := json.Unmarshal([]byte(rest), r); err != nil || r.Drill == "" {
		return nil, false
	}
	return r, true
}
