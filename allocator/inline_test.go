package allocator_test

import (
	"os/exec"
	"regexp"
	"testing"
)

// TestIntendedInlining keeps the fast paths free of calls: a warm tag
// costs a name comparison and an atomic add only while Buffer.TryTake and
// Index.Find are inlined into allocator.Next and client.Next. The
// inliner's budget is small, so a harmless-looking line can push them out;
// this says so instead of a slower benchmark nobody reads.
func TestIntendedInlining(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the packages with the compiler's inlining report")
	}
	out, err := exec.Command("go", "build", "-gcflags=-m",
		"github.com/idmint/idmint/segment",
		"github.com/idmint/idmint/allocator",
		"github.com/idmint/idmint/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Paths in the report are relative to this package's directory.
	for _, want := range []string{
		`\bbuffer\.go:\d+:\d+: can inline \(\*Buffer\)\.TryTake$`,
		`\bindex\.go:\d+:\d+: can inline \(\*Index\)\.Find$`,
		`(^|\./)allocator\.go:\d+:\d+: inlining call to segment\.\(\*Buffer\)\.TryTake$`,
		`(^|\./)allocator\.go:\d+:\d+: inlining call to segment\.\(\*Index\)\.Find$`,
		`/client/client\.go:\d+:\d+: inlining call to segment\.\(\*Buffer\)\.TryTake$`,
		`/client/client\.go:\d+:\d+: inlining call to segment\.\(\*Index\)\.Find$`,
	} {
		if !regexp.MustCompile("(?m)" + want).Match(out) {
			t.Errorf("the compiler's report has no %q; keep the fast path within the inlining budget", want)
		}
	}
}
