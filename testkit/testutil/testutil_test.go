package testutil_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testutil"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as testing's does.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder on its own goroutine (Fatalf ends it) and
// returns what it failed with, "" when it did not fail.
func run(t *testing.T, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the helper did not return within a minute")
	}
	return r.failed
}

func TestEventually(t *testing.T) {
	t.Run("holds after a few looks", func(t *testing.T) {
		var looks atomic.Int32
		failed := run(t, func(tb testing.TB) {
			testutil.Eventually(tb, time.Minute, "three looks", func() bool { return looks.Add(1) >= 3 })
		})
		if failed != "" || looks.Load() != 3 {
			t.Fatalf("failed %q after %d looks, want success after 3", failed, looks.Load())
		}
	})
	t.Run("gives up naming what it waited for and the state", func(t *testing.T) {
		failed := run(t, func(tb testing.TB) {
			testutil.EventuallyOr(tb, 20*time.Millisecond, "never", func() bool { return false }, func() string { return "state x" })
		})
		if !strings.Contains(failed, "waiting for never") || !strings.Contains(failed, "state x") {
			t.Fatalf("failed with %q, want what it waited for and the state", failed)
		}
	})
}

func TestFreeAddr(t *testing.T) {
	addr := testutil.FreeAddr(t)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	ln.Close()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("FreeAddr = %s, want a loopback address", addr)
	}
}

func TestGetJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			fmt.Fprint(w, "not json")
			return
		}
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, `{"n": 7}`)
	}))
	t.Cleanup(srv.Close)
	var v struct{ N int }
	if code := testutil.GetJSON(t, srv.URL, &v); code != http.StatusTeapot || v.N != 7 {
		t.Fatalf("GetJSON = %d, %+v; want 418, n 7", code, v)
	}
	if failed := run(t, func(tb testing.TB) { testutil.GetJSON(tb, srv.URL+"/bad", &v) }); !strings.Contains(failed, "/bad") {
		t.Fatalf("GetJSON of a body that is not JSON failed with %q, want the URL named", failed)
	}
}
