package segment_test

import (
	"testing"
	"time"
)

// eventually polls cond until it holds, failing tb with msg after timeout.
// segment is a module of its own, for the client's sake, so it cannot use
// the main module's testkit/testutil.
func eventually(tb testing.TB, timeout time.Duration, msg string, cond func() bool) {
	tb.Helper()
	start, poll := time.Now(), time.Millisecond
	for !cond() {
		if time.Since(start) > timeout {
			tb.Fatalf("gave up after %v waiting for %s", timeout, msg)
		}
		time.Sleep(poll)
		poll = min(2*poll, 50*time.Millisecond)
	}
}
