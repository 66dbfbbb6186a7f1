package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/testlog"
	"github.com/idmint/idmint/wire"
)

// failingAllocator answers every request at once with err: ErrClosed for
// the tag "closing", ErrUnavailable for the others.
type failingAllocator struct{}

func (failingAllocator) err(tag string) error {
	if tag == "closing" {
		return allocator.ErrClosed
	}
	return allocator.ErrUnavailable
}
func (f failingAllocator) Next(_ context.Context, tag string) (int64, error) { return 0, f.err(tag) }
func (f failingAllocator) NextRanges(_ context.Context, tag string, _ int, _ []segment.Range) ([]segment.Range, error) {
	return nil, f.err(tag)
}
func (failingAllocator) Stats() []segment.Stats { return nil }
func (f failingAllocator) TagStats(_ context.Context, tag string) (segment.Stats, error) {
	return segment.Stats{}, f.err(tag)
}
func (failingAllocator) Ping(context.Context) error { return allocator.ErrUnavailable }
func (f failingAllocator) GrantRange(_ context.Context, r allocator.RangeRequest) (allocator.Segment, bool, error) {
	return allocator.Segment{}, false, f.err(r.Tag)
}
func (f failingAllocator) GiveBackRange(_ context.Context, _ uuid.UUID, _ allocator.Holder, tag string, _, _ int64) (bool, error) {
	return false, f.err(tag)
}
func (failingAllocator) RoundTrip() allocator.RoundTripStatus      { return allocator.RoundTripStatus{} }
func (failingAllocator) Timeout(floor time.Duration) time.Duration { return floor }

// failureLines reads the "request failed" lines of a JSON log: how many per
// code, and the suppressed counts they report, added up per code.
func failureLines(tb testing.TB, log string) (lines, suppressed map[string]int64) {
	tb.Helper()
	lines, suppressed = map[string]int64{}, map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var rec struct {
			Msg        string `json:"msg"`
			Code       string `json:"code"`
			Suppressed int64  `json:"suppressed"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			tb.Fatalf("%v: %s", err, sc.Text())
		}
		if rec.Msg == "request failed" {
			lines[rec.Code]++
			suppressed[rec.Code] += rec.Suppressed
		}
	}
	return lines, suppressed
}

// TestServer_FailureLogLimited: 10,000 503s in one second write one log
// line per error code, not 10,000; the next line a second later says how
// many were dropped; every 503 is still counted in the metrics.
func TestServer_FailureLogLimited(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	var logs testlog.Buffer
	metrics := httpapi.NewMetrics()
	srv := httpapi.NewServer(httpapi.Config{Allocator: failingAllocator{}, Metrics: metrics,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Now:    func() time.Time { return time.Unix(0, now.Load()) }})
	get := func(path string) {
		t.Helper()
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
	}
	const n = 10_000
	for range n {
		get("/id?biz_tag=order")
	}
	for range 10 {
		get("/id?biz_tag=closing")
	}
	lines, suppressed := failureLines(t, logs.String())
	if lines[wire.CodeUnavailable] != 1 || lines[wire.CodeShuttingDown] != 1 || len(lines) != 2 {
		t.Fatalf("%d 503s in one second wrote %v lines, want one per code", n+10, lines)
	}
	if len(suppressed) != 2 || suppressed[wire.CodeUnavailable] != 0 {
		t.Fatalf("the first lines report %v suppressed", suppressed)
	}

	now.Add(int64(time.Second))
	get("/id?biz_tag=order")
	get("/id?biz_tag=order")
	lines, suppressed = failureLines(t, logs.String())
	if lines[wire.CodeUnavailable] != 2 || suppressed[wire.CodeUnavailable] != n-1 {
		t.Fatalf("a second later: %v lines, %v suppressed; want 2 lines and %d suppressed", lines, suppressed, n-1)
	}
	if suppressed[wire.CodeShuttingDown] != 0 {
		t.Fatalf("another code's count moved: %v", suppressed)
	}

	web := httptest.NewServer(srv)
	t.Cleanup(web.Close)
	families, _ := scrape(t, web.URL)
	if v, _ := value(families, "idmint_http_requests_total", "route", "/id", "code", "503"); v != n+12 {
		t.Fatalf("idmint_http_requests_total{code=503} = %v, want %d: the limit drops lines, not counts", v, n+12)
	}
}
