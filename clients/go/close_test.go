package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
)

// deadlines is a transport that records how long each request had left
// when it was sent.
type deadlines struct {
	mu   sync.Mutex // protects left
	left []time.Duration
}

func (d *deadlines) RoundTrip(req *http.Request) (*http.Response, error) {
	if dl, ok := req.Context().Deadline(); ok {
		d.mu.Lock()
		d.left = append(d.left, time.Until(dl))
		d.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (d *deadlines) longest() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	var m time.Duration
	for _, l := range d.left {
		m = max(m, l)
	}
	return m
}

// TestClient_AttemptTimeout checks that one attempt ends before the callers
// waiting for its range give up: by default it is half the wait, and a
// configuration with both set the other way round is refused.
func TestClient_AttemptTimeout(t *testing.T) {
	url := serve(t, memStore(t, 10, 0))
	tests := []struct {
		name          string
		attempt, wait time.Duration
		wantErr       bool
		// longest is what the longest attempt may have left when sent.
		longest time.Duration
	}{
		{name: "defaults", longest: segment.DefaultWaitTimeout / 2},
		{name: "wait set", wait: 600 * time.Millisecond, longest: 300 * time.Millisecond},
		{name: "both set, attempt below", attempt: 500 * time.Millisecond, wait: time.Second, longest: 500 * time.Millisecond},
		{name: "attempt alone", attempt: 5 * time.Second, longest: 5 * time.Second},
		{name: "both set, equal", attempt: time.Second, wait: time.Second, wantErr: true},
		{name: "both set, attempt above", attempt: 3 * time.Second, wait: time.Second, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &deadlines{}
			c, err := client.New(t.Context(), client.Config{
				URLs: []string{url}, Tags: []string{"order"}, Logger: testlog.Discard(),
				HTTPClient:     &http.Client{Transport: d},
				AttemptTimeout: tt.attempt,
				Segment:        segment.Config{WaitTimeout: tt.wait},
			})
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "AttemptTimeout") {
					t.Fatalf("New = %v, want an error about AttemptTimeout", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			if l := d.longest(); l <= 0 || l > tt.longest {
				t.Errorf("an attempt had %v left when sent; want at most %v", l, tt.longest)
			}
		})
	}
}

// idleCloser is a caller's transport that counts CloseIdleConnections.
type idleCloser struct {
	http.RoundTripper
	closes atomic.Int64
}

func (t *idleCloser) CloseIdleConnections() { t.closes.Add(1) }

// TestClient_CloseClosesWhatItOpened checks that Close closes the idle
// connections of the transport the client made itself, and leaves those of
// a caller's HTTPClient alone.
func TestClient_CloseClosesWhatItOpened(t *testing.T) {
	a := allocator.New(allocator.Config{Store: memStore(t, 10, 0), Logger: testlog.Discard()})
	srv := httptest.NewUnstartedServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()}))
	var open atomic.Int64 // connections the server holds open
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		a.Close(context.Background())
	})

	t.Run("own transport", func(t *testing.T) {
		c, err := client.New(t.Context(), client.Config{URLs: []string{srv.URL}, Tags: []string{"order"}, Logger: testlog.Discard()})
		if err != nil {
			t.Fatal(err)
		}
		if open.Load() == 0 {
			t.Fatal("no connection open after the first range")
		}
		if err := c.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		// The server sees the close a moment later; a connection kept
		// alive stays open for the transport's 90s idle timeout.
		for deadline := time.Now().Add(5 * time.Second); open.Load() > 0; {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections still open 5s after Close", open.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	t.Run("caller's transport", func(t *testing.T) {
		tr := &idleCloser{RoundTripper: http.DefaultTransport}
		c, err := client.New(t.Context(), client.Config{URLs: []string{srv.URL}, Tags: []string{"order"}, Logger: testlog.Discard(),
			HTTPClient: &http.Client{Transport: tr}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := tr.closes.Load(); n != 0 {
			t.Errorf("Close closed the idle connections of the caller's transport %d times", n)
		}
	})
}

// TestClient_CloseWaitsForDroppedBuffers checks that Close waits for the
// buffers it dropped for unknown tags to close: no goroutine of the client
// outlives Close.
func TestClient_CloseWaitsForDroppedBuffers(t *testing.T) {
	url := serve(t, memStore(t, 10, 0))
	release := make(chan struct{})
	let := sync.OnceFunc(func() { close(release) })
	t.Cleanup(let)
	var loadEnded atomic.Bool // the unknown tag's load goroutine ended
	c, err := client.New(t.Context(), client.Config{URLs: []string{url}, Logger: testlog.Discard(),
		Segment: segment.Config{OnLoad: func(tag string, _ time.Duration, _ error) {
			if tag == "invoice" {
				// Holds the load's goroutine, and so the dropped
				// buffer's Close, until the test lets it go.
				<-release
				loadEnded.Store(true)
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := c.Next(ctx, "invoice"); !errors.Is(err, client.ErrUnknownTag) {
		t.Fatalf("Next(invoice) = %v, want unknown tag", err)
	}
	closed := make(chan bool)
	go func() {
		c.Close(context.Background())
		closed <- loadEnded.Load()
	}()
	// Close cannot return while the load is held, if it waits for its
	// goroutines: then this wait always runs out. One that does not wait
	// returns at once.
	select {
	case <-closed:
		t.Fatal("Close returned while the buffer it dropped for an unknown tag was still closing")
	case <-time.After(200 * time.Millisecond):
	}
	let()
	if !<-closed {
		t.Error("Close returned before the buffer it dropped for an unknown tag was closed")
	}
}
