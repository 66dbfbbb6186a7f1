package testutil

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// maxPoll is the longest Eventually sleeps between two looks at its
// condition: short enough not to slow a test down, long enough not to spin.
const maxPoll = 10 * time.Millisecond

// Eventually polls cond until it holds, starting every millisecond and
// backing off to every 10 ms, and fails tb (naming msg) once timeout has
// passed without it. It returns how long the wait took.
//
// msg comes before cond so that a call whose condition is a long function
// literal still reads "wait this long for this".
func Eventually(tb testing.TB, timeout time.Duration, msg string, cond func() bool) time.Duration {
	tb.Helper()
	return EventuallyOr(tb, timeout, msg, cond, nil)
}

// EventuallyOr is Eventually that, when it gives up, also says what explain
// returns: the state the condition was waiting on. explain may be nil.
func EventuallyOr(tb testing.TB, timeout time.Duration, msg string, cond func() bool, explain func() string) time.Duration {
	tb.Helper()
	start := time.Now()
	poll := time.Millisecond
	for !cond() {
		if time.Since(start) > timeout {
			state := ""
			if explain != nil {
				state = ":\n" + explain()
			}
			tb.Fatalf("gave up after %v waiting for %s%s", timeout, msg, state)
		}
		time.Sleep(poll)
		poll = min(2*poll, maxPoll)
	}
	return time.Since(start)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago (and
// may be taken by someone else by the time it is used).
func FreePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// FreeAddr is FreePort as a "127.0.0.1:port" address.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(tb)))
}

// client bounds every GetJSON, so a server that never answers fails the
// test instead of hanging it.
var client = &http.Client{Timeout: time.Minute}

// GetJSON gets url, decodes its JSON body into v and returns the status
// code; it fails tb when the request fails or the body is not JSON.
func GetJSON(tb testing.TB, url string, v any) int {
	tb.Helper()
	resp, err := client.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		tb.Fatalf("%s: %v", url, err)
	}
	return resp.StatusCode
}
