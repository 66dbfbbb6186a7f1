package pgtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Environment variables of the skip policy and the scenario report.
const (
	// envAllowSkip lists, comma-separated, the tests (top-level names, or
	// "all") that may skip a scenario this machine cannot run. Any other
	// such skip fails the test, so that a green run never hides a
	// scenario that did not run.
	envAllowSkip = "IDMINT_TEST_ALLOW_SKIP"
	// envReport names a file to which every test that used a server, or
	// could not run its scenario, appends one line: mode, package, test,
	// outcome. `make test` sets it and prints the file at the end.
	envReport = "IDMINT_TEST_REPORT"
)

// reported holds the lines already written by this test binary, so that a
// test asking for a server many times is listed once.
var reported struct {
	mu    sync.Mutex
	lines map[string]bool
}

// record appends one line to the report file, if there is one.
func record(tb testing.TB, mode, outcome string) {
	path := os.Getenv(envReport)
	if path == "" {
		return
	}
	line := strings.Join([]string{mode, testPackage(), topName(tb), outcome}, "\t") + "\n"
	reported.mu.Lock()
	defer reported.mu.Unlock()
	if reported.lines[line] {
		return
	}
	if reported.lines == nil {
		reported.lines = map[string]bool{}
	}
	reported.lines[line] = true
	// One write of a short line to a file opened for appending: lines of
	// test binaries running side by side do not interleave.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		_, err = f.WriteString(line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		tb.Errorf("pgtest: %s: %v", envReport, err)
	}
}

// Skip ends tb because this machine cannot run its scenario, for the given
// reason. It fails the test, saying so, unless IDMINT_TEST_ALLOW_SKIP names
// the test (its top-level name) or is "all"; then it skips. Either way the
// scenario report lists it as not run.
func Skip(tb testing.TB, reason string) {
	tb.Helper()
	name := topName(tb)
	if allowSkip(name) {
		record(tb, "-", "SKIPPED: "+reason)
		tb.Skipf("%s (%s allows the skip)", reason, envAllowSkip)
	}
	record(tb, "-", "NOT RUN: "+reason)
	tb.Fatalf("%s\n\tthis scenario did not run; to skip it on purpose, set %s=%s", reason, envAllowSkip, name)
}

func allowSkip(name string) bool {
	list := strings.Split(os.Getenv(envAllowSkip), ",")
	for i := range list {
		list[i] = strings.TrimSpace(list[i])
	}
	return slices.Contains(list, "all") || slices.Contains(list, name)
}

// topName is the name of tb's top-level test.
func topName(tb testing.TB) string {
	name, _, _ := strings.Cut(tb.Name(), "/")
	return name
}

// testPackage guesses the package under test from the test binary's name
// (go test builds pkg.test).
func testPackage() string {
	return strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
}

// SkipOptional skips an optional scenario, one that needs what a default run
// does not have (a browser, a built image) and that has its own variable to
// require it, and lists it in the scenario report as skipped.
func SkipOptional(tb testing.TB, reason string) {
	tb.Helper()
	record(tb, "-", "SKIPPED (optional): "+reason)
	tb.Skip(reason)
}
