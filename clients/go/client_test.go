package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/wire"
)

// losing is an instance that grants, then loses the reply (the connection
// drops), while lose is above zero.
type losing struct {
	api  http.Handler
	lose atomic.Int64
	seen atomic.Int64 // range requests received

	mu   sync.Mutex
	ids  []string // their request IDs, in order
	lost []string // the request IDs whose reply was lost, in order
	// deadWhileLosing fails /id/live while replies are lost: a region
	// that loses every reply looks down to a client's probe too.
	deadWhileLosing bool
}

func (l *losing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/segments" {
		if l.deadWhileLosing && r.URL.Path == "/id/live" && l.lose.Load() > 0 {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		l.api.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req wire.SegmentRequest
	_ = json.Unmarshal(body, &req)
	l.mu.Lock()
	l.ids = append(l.ids, req.RequestID)
	l.mu.Unlock()
	l.seen.Add(1)
	if l.lose.Add(-1) < 0 {
		l.lose.Add(1)
		l.api.ServeHTTP(w, r)
		return
	}
	l.api.ServeHTTP(httptest.NewRecorder(), r) // granted…
	l.mu.Lock()
	l.lost = append(l.lost, req.RequestID)
	l.mu.Unlock()
	panic(http.ErrAbortHandler) // …and the reply lost
}

// lostIDs are the request IDs whose reply was lost: a request counted
// before lose was set may still be answered.
func (l *losing) lostIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lost...)
}

func (l *losing) requestIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ids...)
}

func distinctIDs(lists ...[]string) int {
	set := map[string]bool{}
	for _, l := range lists {
		for _, id := range l {
			set[id] = true
		}
	}
	return len(set)
}

// startLosing starts an instance over store that loses the replies of its
// first lose range requests.
func startLosing(tb testing.TB, store allocator.Store, lose int64) (*losing, string) {
	tb.Helper()
	a := allocator.New(allocator.Config{Store: store, Logger: testlog.Discard()})
	l := &losing{api: httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()})}
	l.lose.Store(lose)
	srv := httptest.NewServer(l)
	tb.Cleanup(func() {
		srv.Close()
		a.Close(context.Background())
	})
	return l, srv.URL
}

func memStore(tb testing.TB, step, maxStep int64) *memstore.Store {
	tb.Helper()
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: step, MaxStep: maxStep}); err != nil {
		tb.Fatal(err)
	}
	return m
}

func newClient(tb testing.TB, cfg client.Config) *client.Client {
	tb.Helper()
	cfg.Logger = testlog.Discard()
	if cfg.RetryMin == 0 {
		cfg.RetryMin, cfg.RetryMax = time.Millisecond, 5*time.Millisecond
	}
	c, err := client.New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func maxIDOf(tb testing.TB, m *memstore.Store) int64 {
	tb.Helper()
	tags, err := m.Tags(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return tags[0].MaxID
}

func TestClient_LostReply(t *testing.T) {
	t.Run("the next instance returns the same range", func(t *testing.T) {
		m := memStore(t, 10, 10)
		first, url1 := startLosing(t, m, 1)
		second, url2 := startLosing(t, m, 0)
		c := newClient(t, client.Config{URLs: []string{url1, url2}})
		ids, err := c.NextN(t.Context(), "order", 10)
		if err != nil || ids[0] != 1 || ids[9] != 10 {
			t.Fatalf("NextN = %v, %v; want 1..10", ids, err)
		}
		// The second instance may also see the prefetch of 11..20, which
		// draining 1..10 starts: what matters is that its first request
		// carries the lost one's request ID.
		lost, retried := first.requestIDs(), second.requestIDs()
		if st := c.Stats(); st.Tags[0].Recovered != 1 || len(lost) != 1 || len(retried) == 0 || retried[0] != lost[0] {
			t.Fatalf("recovered %d, request IDs %v then %v; want the lost range recovered by the second instance under its ID",
				st.Tags[0].Recovered, lost, retried)
		}
		// Read max_id before the requests: every grant it counts was seen.
		got := maxIDOf(t, m)
		if distinct := distinctIDs(first.requestIDs(), second.requestIDs()); got > 10*int64(distinct) {
			t.Fatalf("max_id %d after %d distinct requests of 10: a retry was granted a second range", got, distinct)
		}
	})

	t.Run("a load that gives up is resumed by the next", func(t *testing.T) {
		m := memStore(t, 10, 10)
		inst, url := startLosing(t, m, 1_000_000)
		c := newClient(t, client.Config{URLs: []string{url}, Segment: segment.Config{
			LoadTimeout: 50 * time.Millisecond, WaitTimeout: time.Second, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
		}})
		if _, err := c.Next(t.Context(), "order"); !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("Next while every reply is lost: %v", err)
		}
		if inst.seen.Load() < 1 {
			t.Fatal("no range request reached the instance")
		}
		inst.lose.Store(0)
		deadline := time.Now().Add(10 * time.Second)
		var id int64
		var err error
		for id, err = c.Next(t.Context(), "order"); err != nil; id, err = c.Next(t.Context(), "order") {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond) // the buffer's backoff
		}
		// Taking id 1 crosses the prefetch threshold (10% of 10 IDs), so
		// the next range, 11..20, may already be granted: max_id 10 or 20.
		// A retry granted a range of its own would have made id 11 or more.
		if mx := maxIDOf(t, m); id != 1 || (mx != 10 && mx != 20) {
			t.Fatalf("first id %d, max_id %d: want 1, the range granted to the first request, and max_id 10 (or 20 after the prefetch)", id, mx)
		}
	})
}

func TestClient_Errors(t *testing.T) {
	m := memStore(t, 10, 0)
	_, url := startLosing(t, m, 0)
	c := newClient(t, client.Config{URLs: []string{url}})
	ctx := t.Context()
	if _, err := c.Next(ctx, "no such"); !errors.Is(err, client.ErrInvalidTag) {
		t.Errorf("invalid tag: %v", err)
	}
	if _, err := c.Next(ctx, "invoice"); !errors.Is(err, client.ErrUnknownTag) {
		t.Errorf("unknown tag: %v", err)
	}
	if _, err := c.NextN(ctx, "order", 0); err == nil {
		t.Error("NextN(0) succeeded")
	}
	if _, err := c.Next(ctx, "order"); err != nil {
		t.Fatal(err)
	}
	// Unknown tags keep no buffer.
	if st := c.Stats(); len(st.Tags) != 1 || st.Tags[0].Tag != "order" {
		t.Errorf("buffers %+v, want order only", st.Tags)
	}
	for _, cfg := range []client.Config{{}, {URLs: []string{"localhost:8080"}}, {URLs: []string{"ftp://x"}}} {
		if _, err := client.New(ctx, cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	if _, err := client.New(ctx, client.Config{URLs: []string{url}, Tags: []string{"invoice"}, Logger: testlog.Discard()}); !errors.Is(err, client.ErrUnknownTag) {
		t.Errorf("New with an unknown tag: %v", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Next(ctx, "order"); !errors.Is(err, client.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// TestClient_Concurrent runs clients of two instances beside the instances'
// own callers (allocator.Next) on one store, with ranges small enough to
// turn over all the time: no ID twice, and every client gives back at
// Close only what nobody took after it.
func TestClient_Concurrent(t *testing.T) {
	const goroutines, each = 4, 3000
	m := memStore(t, 5, 50)
	a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard()})
	defer a.Close(context.Background())
	var urls []string
	for range 2 {
		srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()}))
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	check := checker.New()
	var wg sync.WaitGroup
	for ci := range 3 {
		c := newClient(t, client.Config{URLs: urls, Segment: segment.Config{Period: time.Millisecond}})
		for g := range goroutines {
			wg.Go(func() {
				for range each {
					check.Attempt()
					id, err := c.Next(t.Context(), "order")
					if err != nil {
						check.Fail(err)
						continue
					}
					check.Ack(fmt.Sprintf("client-%d/%d", ci, g), "order", id)
				}
				if ci == 0 && g == 0 {
					c.Close(t.Context()) // gives back while the others run
				}
			})
		}
	}
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				check.Attempt()
				id, err := a.Next(t.Context(), "order")
				if err != nil {
					check.Fail(err)
					continue
				}
				check.Ack(fmt.Sprint("instance/", g), "order", id)
			}
		})
	}
	wg.Wait()
	r := check.Report()
	if !r.Valid() || r.IDs() < 3*goroutines*each {
		t.Fatalf("%s", r)
	}
}

// claiming is an instance in front of which a stranger, who saw the
// client's first range request go by (its request ID is logged and sent as
// Idempotency-Key), claims that request ID with its own holder key before the
// client's request reaches the store; the client's request is then lost.
type claiming struct {
	api     http.Handler
	mu      sync.Mutex
	claimed *wire.SegmentResponse
}

func (c *claiming) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	first := c.claimed == nil && r.URL.Path == "/v1/segments"
	c.mu.Unlock()
	if !first {
		c.api.ServeHTTP(w, r)
		return
	}
	var req wire.SegmentRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req.HolderKey = "a-strangers-own-holder-key-0123456789"
	body, _ := json.Marshal(req)
	rec := httptest.NewRecorder()
	c.api.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/segments", bytes.NewReader(body)))
	var got wire.SegmentResponse
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil {
		http.Error(w, "stranger's claim failed: "+rec.Body.String(), http.StatusInternalServerError)
		return
	}
	c.mu.Lock()
	c.claimed = &got
	c.mu.Unlock()
	panic(http.ErrAbortHandler) // the client's own request: lost on the way
}

// TestClient_RequestIDClaimedByStranger: a stranger claims the client's
// request ID before the client's request reaches the store. The client's
// retry is refused (not_holder): it must go on with a new request, serve
// none of the stranger's range, and not fail its caller.
func TestClient_RequestIDClaimedByStranger(t *testing.T) {
	m := memStore(t, 10, 10)
	a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard()})
	h := &claiming{api: httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()})}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		a.Close(context.Background())
	})
	c := newClient(t, client.Config{URLs: []string{srv.URL}})
	ids, err := c.NextN(context.Background(), "order", 10)
	if err != nil {
		t.Fatalf("NextN: %v (a request ID claimed by a stranger must cost a new request, not the caller's call)", err)
	}
	h.mu.Lock()
	claimed := h.claimed
	h.mu.Unlock()
	if claimed == nil {
		t.Fatal("the stranger claimed nothing: the test proves nothing")
	}
	for _, id := range ids {
		if id >= claimed.First && id <= claimed.Last {
			t.Fatalf("id %d is in the stranger's range [%d, %d]: a duplicate", id, claimed.First, claimed.Last)
		}
	}
}
