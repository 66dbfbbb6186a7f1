// Command drill runs drill tests with `go test -json` and reads their
// results as data (testkit/drill reports), never their log wording. It
// prints one line per report and a verdict, and exits non-zero when go test
// fails, a report says FAIL, a test failed, or fewer reports came back than
// -want (a drill that skipped has not passed).
//
//	go run ./testkit/cmd/drill -want 1 -- -count=1 -run '^TestDrillFar$' ./testkit/faults -args -drill.far=20s
//
// Everything after -- goes to go test as is. With -v every line of the
// tests' output is shown as it comes; without, only each test's outcome,
// the reports, and the output of a test that failed.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/idmint/idmint/testkit/drill"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	goBin := flag.String("go", "go", "the go command")
	want := flag.Int("want", 1, "fewest reports for a pass")
	verbose := flag.Bool("v", false, "show every line of the tests' output as it comes")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: drill [-go GO] [-want N] [-v] -- GO_TEST_ARGS...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	cmd := exec.Command(*goBin, append([]string{"test", "-json"}, flag.Args()...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fatal(err)
	}
	// Ctrl-C goes to go test and its tests (one process group), whose
	// cleanups stop what they started; this command waits for them.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		fatal(err)
	}
	s := summarise(out, os.Stdout, *verbose)
	runErr := cmd.Wait()
	os.Exit(s.verdict(os.Stdout, runErr, *want))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "drill:", err)
	os.Exit(2)
}

// summary is what the stream said.
type summary struct {
	reports []*drill.Report
	failed  []string // tests and packages that failed
	outputs map[string][]string
}

// summarise reads go test -json from r, echoing to w as it goes.
func summarise(r io.Reader, w io.Writer, verbose bool) *summary {
	s := &summary{outputs: map[string][]string{}}
	// test2json cuts a long line into several output events; a line is
	// whole once its newline came.
	partial := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(w, sc.Text()) // a build error, a line not of test2json
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			e.Output = partial[key] + e.Output
			if !strings.HasSuffix(e.Output, "\n") {
				partial[key] = e.Output
				continue
			}
			delete(partial, key)
			if rep, ok := drill.Parse(e.Output); ok {
				s.reports = append(s.reports, rep)
				fmt.Fprint(w, line(rep))
				continue
			}
			if verbose {
				fmt.Fprint(w, e.Output)
			}
			s.outputs[key] = append(s.outputs[key], e.Output)
		case "pass", "fail", "skip":
			if e.Test != "" && !strings.Contains(e.Test, "/") {
				fmt.Fprintf(w, "--- %s %s\n", strings.ToUpper(e.Action), e.Test)
			}
			if e.Action == "fail" {
				s.failed = append(s.failed, strings.TrimSpace(key))
				if !verbose {
					out := s.outputs[key]
					fmt.Fprint(w, strings.Join(out[max(0, len(out)-60):], ""))
				}
			}
			if e.Action != "fail" {
				delete(s.outputs, key)
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(w, "drill: reading go test -json:", err)
		s.failed = append(s.failed, "the test output")
	}
	return s
}

// line is a report as one readable line: drill, test, verdict, figures.
func line(r *drill.Report) string {
	names := make([]string, 0, len(r.Figures))
	for k := range r.Figures {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "drill %s %s %s:", r.Drill, r.Test, r.Verdict)
	for _, k := range names {
		v := r.Figures[k]
		if f, ok := v.(float64); ok {
			if f == math.Trunc(f) && math.Abs(f) < 1e15 {
				fmt.Fprintf(&b, " %s=%.0f", k, f) // a count
			} else {
				fmt.Fprintf(&b, " %s=%.4g", k, f)
			}
			continue
		}
		fmt.Fprintf(&b, " %s=%v", k, v)
	}
	b.WriteByte('\n')
	return b.String()
}

// verdict prints the outcome and returns the exit status.
func (s *summary) verdict(w io.Writer, runErr error, want int) int {
	var bad []string
	for _, r := range s.reports {
		if r.Verdict != "ok" {
			bad = append(bad, r.Test)
		}
	}
	status := 0
	switch {
	case runErr != nil:
		fmt.Fprintf(w, "drill: go test: %v; failed: %s\n", runErr, strings.Join(slices.Compact(slices.Sorted(slices.Values(s.failed))), ", "))
		status = 1
	case len(bad) > 0:
		fmt.Fprintf(w, "drill: %d of %d runs FAIL: %s\n", len(bad), len(s.reports), strings.Join(bad, ", "))
		status = 1
	case len(s.failed) > 0:
		fmt.Fprintf(w, "drill: failed: %s\n", strings.Join(s.failed, ", "))
		status = 1
	case len(s.reports) < want:
		fmt.Fprintf(w, "drill: %d reports, want at least %d (did the drill skip?)\n", len(s.reports), want)
		status = 1
	default:
		fmt.Fprintf(w, "drill: %d runs, all ok\n", len(s.reports))
	}
	return status
}
