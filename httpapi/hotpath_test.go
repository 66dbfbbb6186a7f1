package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/testlog"
	"github.com/idmint/idmint/wire"
)

// TestServer_IDsRanges takes IDs as ranges and as lists from two instances
// over one store, so that each one's segments are interleaved with the
// other's: every reply holds exactly count IDs, ranges are increasing and
// merged (consecutive IDs are one pair), and no ID comes twice.
func TestServer_IDsRanges(t *testing.T) {
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10}); err != nil {
		t.Fatal(err)
	}
	var servers [2]*httptest.Server
	for i := range servers {
		a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard(),
			Segment: segment.Config{Period: time.Nanosecond, WaitTimeout: 30 * time.Second}})
		t.Cleanup(func() { a.Close(context.Background()) })
		servers[i] = validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()})))
		t.Cleanup(servers[i].Close)
	}
	seen := map[int64]bool{}
	take := func(id int64) {
		t.Helper()
		if id < 1 || seen[id] {
			t.Fatalf("id %d: duplicate or not positive", id)
		}
		seen[id] = true
	}
	gaps := 0
	for i := range 40 {
		srv := servers[i%2]
		count := 1 + i*3
		if i%4 < 2 {
			status, _, body := getURL(t, srv.URL+"/ids?biz_tag=order&format=ranges&count="+strconv.Itoa(count))
			var got struct {
				Tag    string      `json:"biz_tag"`
				Ranges [][2]string `json:"ranges"`
			}
			if err := json.Unmarshal(body, &got); status != 200 || err != nil || got.Tag != "order" || len(got.Ranges) == 0 {
				t.Fatalf("ranges: %d %s (%v)", status, body, err)
			}
			n, last := 0, int64(0)
			for _, r := range got.Ranges {
				first, err1 := strconv.ParseInt(r[0], 10, 64)
				end, err2 := strconv.ParseInt(r[1], 10, 64)
				if err1 != nil || err2 != nil || first > end || first <= last+1 && last > 0 {
					t.Fatalf("ranges %s: [%s,%s] after %d: not increasing, or not merged", body, r[0], r[1], last)
				}
				for id := first; id <= end; id++ {
					take(id)
				}
				n += int(end - first + 1)
				last = end
			}
			if n != count {
				t.Fatalf("ranges %s: %d ids, want %d", body, n, count)
			}
			gaps += len(got.Ranges) - 1
			continue
		}
		format := []string{"", "&format=list"}[i%2]
		status, _, body := getURL(t, srv.URL+"/ids?biz_tag=order&count="+strconv.Itoa(count)+format)
		var got struct {
			IDs []string `json:"ids"`
		}
		if err := json.Unmarshal(body, &got); status != 200 || err != nil || len(got.IDs) != count {
			t.Fatalf("list: %d %s (%v)", status, body, err)
		}
		for _, s := range got.IDs {
			id, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			take(id)
		}
	}
	if gaps == 0 {
		t.Fatal("no reply spanned two segments with a gap between them: the test proves less than it says")
	}
	for _, q := range []string{"format=bad", "format=ranges&format=ranges", "format="} {
		status, _, body := getURL(t, servers[0].URL+"/ids?biz_tag=order&count=3&"+q)
		if status != 400 || errorCode(t, body) != wire.CodeInvalidFormat {
			t.Fatalf("%s: %d %s", q, status, body)
		}
	}
}

// TestServer_RequestIDs checks the request IDs of the logs: a client's
// X-Request-Id is kept, others get distinct ones, and an error's log line
// carries the same ID as the request's access log line.
func TestServer_RequestIDs(t *testing.T) {
	a := orderAllocator(t, memstore.New())
	var logs testlog.Buffer
	// A clock a second further at each reading, so that the failure lines,
	// at most one a second per code, are all written.
	base, ticks := time.Now(), atomic.Int64{}
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{
		Allocator: a, AccessLog: true, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Now: func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * time.Second) },
	})))
	defer srv.Close()
	a.Close(context.Background()) // every ID request now fails with a logged 503

	for _, hdr := range [][]string{{"X-Request-Id", "client-chosen-1"}, nil, nil} {
		if status, _, body := get(t, srv, "/id?biz_tag=order", hdr...); status != 503 {
			t.Fatalf("status %d: %s", status, body)
		}
	}
	var access, failed []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var l struct {
			Msg       string `json:"msg"`
			RequestID string `json:"request_id"`
			Status    int    `json:"status"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		switch l.Msg {
		case "http":
			access = append(access, l.RequestID)
		case "request failed":
			failed = append(failed, l.RequestID)
		}
	}
	if len(access) != 3 || len(failed) != 3 {
		t.Fatalf("want 3 access and 3 failure lines:\n%s", logs.String())
	}
	if access[0] != "client-chosen-1" || access[1] == "" || access[2] == "" || access[1] == access[2] {
		t.Fatalf("access log request IDs %q", access)
	}
	for i := range access {
		if failed[i] != access[i] {
			t.Fatalf("request %d: failure logged with request ID %q, access log %q", i, failed[i], access[i])
		}
	}
}

// TestServer_AccessLogOff checks that the access log is off unless asked for.
func TestServer_AccessLogOff(t *testing.T) {
	a := orderAllocator(t, memstore.New())
	var logs testlog.Buffer
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})))
	defer srv.Close()
	if status, _, body := get(t, srv, "/id?biz_tag=order"); status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	if strings.Contains(logs.String(), `"msg":"http"`) {
		t.Fatalf("access log line without AccessLog:\n%s", logs.String())
	}
}

// orderAllocator returns an allocator over m, with the tag "order", whose
// segments wait up to an hour; wrap, if given, wraps the store.
func orderAllocator(tb testing.TB, m *memstore.Store, wrap ...func(*memstore.Store) allocator.Store) *allocator.Allocator {
	tb.Helper()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order"}); err != nil {
		tb.Fatal(err)
	}
	var store allocator.Store = m
	for _, w := range wrap {
		store = w(m)
	}
	a := allocator.New(allocator.Config{Store: store, Logger: testlog.Discard(),
		Segment: segment.Config{WaitTimeout: time.Hour, LoadTimeout: time.Hour}})
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Close(ctx)
	})
	return a
}

// blockingStore never answers an allocation until its context ends.
type blockingStore struct{ *memstore.Store }

func (blockingStore) Allocate(ctx context.Context, _ allocator.Request) (allocator.Segment, error) {
	<-ctx.Done()
	return allocator.Segment{}, ctx.Err()
}

// TestServer_RequestTimeout checks that a request waiting for a segment is
// bounded by RequestTimeout even when the buffer would wait far longer: the
// deadline's timer starts lazily, but it does start.
func TestServer_RequestTimeout(t *testing.T) {
	a := orderAllocator(t, memstore.New(), func(m *memstore.Store) allocator.Store { return blockingStore{m} })
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), RequestTimeout: 50 * time.Millisecond})))
	defer srv.Close()
	// The client gives up long before the buffer would: a request that is
	// not bounded fails the test here instead of hanging it.
	status, hdr, body := getURL(t, srv.URL+"/id?biz_tag=order")
	if status != 503 || errorCode(t, body) != wire.CodeUnavailable || hdr.Get("Retry-After") == "" {
		t.Fatalf("status %d %v: %s", status, hdr, body)
	}
}

// TestServer_Recoverer_Metrics checks that a panic is counted as a 500 of
// its route, like any reply.
func TestServer_Recoverer_Metrics(t *testing.T) {
	a := allocator.New(allocator.Config{Store: memstore.New(), Logger: testlog.Discard()})
	t.Cleanup(func() { a.Close(context.Background()) })
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: panicking{a}, Logger: testlog.Discard()})))
	defer srv.Close()
	if status, _, body := get(t, srv, "/id?biz_tag=order"); status != 500 {
		t.Fatalf("status %d: %s", status, body)
	}
	_, _, body := get(t, srv, "/metrics")
	if !strings.Contains(string(body), `idmint_http_requests_total{code="500",route="/id"} 1`) {
		t.Fatalf("no 500 for /id in:\n%s", body)
	}
}

var _ http.Handler = (*httpapi.Server)(nil)

// deadlineAllocator records the time left to each Next's context.
type deadlineAllocator struct {
	httpapi.Allocator
	left chan time.Duration
}

func (d deadlineAllocator) Next(ctx context.Context, tag string) (int64, error) {
	if dl, ok := ctx.Deadline(); ok {
		d.left <- time.Until(dl)
	}
	return d.Allocator.Next(ctx, tag)
}

// TestServer_RequestTimeoutFollowsRoundTrip: a request is bounded by
// RequestTimeout or, at a database whose round trip asks for more (a cold
// tag's first fetch a WAN away), by the allocator's Timeout: the 50 ms
// floor gives way to the 30 s that 20 round trips of 5 s reach.
func TestServer_RequestTimeoutFollowsRoundTrip(t *testing.T) {
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order"}); err != nil {
		t.Fatal(err)
	}
	rt := allocator.NewRoundTrip(0, 0)
	rt.Observe(5 * time.Second)
	a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard(), RoundTrip: rt})
	t.Cleanup(func() { a.Close(context.Background()) })
	d := deadlineAllocator{Allocator: a, left: make(chan time.Duration, 1)}
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: d, Logger: testlog.Discard(), RequestTimeout: 50 * time.Millisecond})))
	defer srv.Close()
	if status, _, body := getURL(t, srv.URL+"/id?biz_tag=order"); status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	want := a.Timeout(50 * time.Millisecond)
	if left := <-d.left; left <= want/2 || want < time.Second {
		t.Fatalf("request given %v with the allocator's timeout at %v; want about that", left, want)
	}
}
