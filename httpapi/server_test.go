package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/wire"
)

// switchableStore fails every call while down is set, as an unreachable
// database would.
type switchableStore struct {
	*memstore.Store
	down atomic.Bool
}

var errDown = errors.New("dial tcp: connection refused")

func (s *switchableStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	if s.down.Load() {
		return allocator.Segment{}, errDown
	}
	return s.Store.Allocate(ctx, req)
}

func (s *switchableStore) Lookup(ctx context.Context, id uuid.UUID) (allocator.Segment, error) {
	if s.down.Load() {
		return allocator.Segment{}, errDown
	}
	return s.Store.Lookup(ctx, id)
}

func (s *switchableStore) Ping(ctx context.Context) error {
	if s.down.Load() {
		return errDown
	}
	return nil
}

func newServer(tb testing.TB) (*httptest.Server, *switchableStore) {
	tb.Helper()
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10}); err != nil {
		tb.Fatal(err)
	}
	store := &switchableStore{Store: m}
	a := allocator.New(allocator.Config{
		Store: store, Logger: testlog.Discard(), RetryMin: time.Millisecond, RetryMax: time.Millisecond,
		Segment: segment.Config{Period: time.Nanosecond, LoadTimeout: 50 * time.Millisecond, WaitTimeout: 200 * time.Millisecond, MinBackoff: time.Hour},
	})
	tb.Cleanup(func() { a.Close(context.Background()) })
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), MaxCount: 100, Instance: "test"})))
	tb.Cleanup(srv.Close)
	return srv, store
}

func get(tb testing.TB, srv *httptest.Server, path string, header ...string) (int, http.Header, []byte) {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

func errorCode(tb testing.TB, body []byte) string {
	tb.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		tb.Fatalf("not a JSON error: %s (%v)", body, err)
	}
	return e.Error.Code
}

func TestServer_ID(t *testing.T) {
	srv, _ := newServer(t)
	for want := 1; want <= 25; want++ {
		status, hdr, body := get(t, srv, "/id?biz_tag=order")
		if status != 200 || hdr.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d %s: %s", status, hdr.Get("Content-Type"), body)
		}
		var got struct {
			Tag string `json:"biz_tag"`
			ID  string `json:"id"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Tag != "order" || got.ID != strconv.Itoa(want) {
			t.Fatalf("got %+v, want id %d", got, want)
		}
	}
	status, _, body := get(t, srv, "/id?biz_tag=order", "Accept", "text/plain")
	if status != 200 || string(body) != "26\n" {
		t.Fatalf("text: %d %q", status, body)
	}
}

func TestServer_IDs(t *testing.T) {
	srv, _ := newServer(t)
	status, _, body := get(t, srv, "/ids?biz_tag=order&count=25")
	var got struct{ IDs []string }
	if err := json.Unmarshal(body, &got); status != 200 || err != nil || len(got.IDs) != 25 {
		t.Fatalf("status %d: %s", status, body)
	}
	for i, s := range got.IDs {
		if s != strconv.Itoa(i+1) {
			t.Fatalf("ids[%d] = %s", i, s)
		}
	}
}

func TestServer_Errors(t *testing.T) {
	srv, _ := newServer(t)
	tests := []struct {
		name   string
		path   string
		status int
		code   string
	}{
		{"missing tag", "/id", 400, wire.CodeInvalidTag},
		{"empty tag", "/id?biz_tag=", 400, wire.CodeInvalidTag},
		{"bad tag", "/id?biz_tag=" + url.QueryEscape("a b;drop"), 400, wire.CodeInvalidTag},
		{"long tag", "/id?biz_tag=" + strings.Repeat("a", 65), 400, wire.CodeInvalidTag},
		{"tag twice", "/id?biz_tag=order&biz_tag=order", 400, wire.CodeInvalidTag},
		{"unknown tag", "/id?biz_tag=nope", 404, wire.CodeUnknownTag},
		{"unknown tag ids", "/ids?biz_tag=nope&count=2", 404, wire.CodeUnknownTag},
		{"missing count", "/ids?biz_tag=order", 400, wire.CodeInvalidCount},
		{"zero count", "/ids?biz_tag=order&count=0", 400, wire.CodeInvalidCount},
		{"big count", "/ids?biz_tag=order&count=101", 400, wire.CodeInvalidCount},
		{"text count", "/ids?biz_tag=order&count=ten", 400, wire.CodeInvalidCount},
		{"unknown health tag", "/id/health?biz_tag=nope", 404, wire.CodeUnknownTag},
		{"no route", "/nope", 404, wire.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, hdr, body := get(t, srv, tt.path)
			if status != tt.status || hdr.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d (%s), want %d: %s", status, hdr.Get("Content-Type"), tt.status, body)
			}
			if code := errorCode(t, body); code != tt.code {
				t.Fatalf("code %q, want %q", code, tt.code)
			}
		})
	}
	// Bad input changed nothing: the next ID is still the first.
	if _, _, body := get(t, srv, "/id?biz_tag=order"); !strings.Contains(string(body), `"id":"1"`) {
		t.Fatalf("after bad requests: %s", body)
	}
	resp, err := srv.Client().Post(srv.URL+"/id?biz_tag=order", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 405 || errorCode(t, body) != wire.CodeMethod {
		t.Fatalf("POST: %d %s", resp.StatusCode, body)
	}
}

func TestServer_Health(t *testing.T) {
	srv, store := newServer(t)
	health := func(path string) (int, httpapi.Health) {
		t.Helper()
		status, _, body := get(t, srv, path)
		var h httpapi.Health
		if err := json.Unmarshal(body, &h); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return status, h
	}

	status, h := health("/id/health")
	if status != 200 || h.Status != httpapi.StatusOK || !h.Database.Reachable || len(h.Tags) != 0 || h.Version != 1 {
		t.Fatalf("fresh: %d %+v", status, h)
	}
	get(t, srv, "/ids?biz_tag=order&count=3")
	status, h = health("/id/health?biz_tag=order")
	if status != 200 || len(h.Tags) != 1 {
		t.Fatalf("after ids: %d %+v", status, h)
	}
	tag := h.Tags[0]
	if tag.Tag != "order" || tag.Current == nil || tag.Current.First != 1 || tag.Current.Last != 10 ||
		tag.Next != 4 || tag.Remaining != 7 || tag.RemainingRatio != 0.7 || tag.Issued != 3 || tag.SegmentLoads < 1 || !tag.Serving {
		t.Fatalf("tag health: %+v", tag)
	}

	// The database goes away: serving from memory is degraded, then
	// running dry is unavailable, with Retry-After on the IDs endpoint.
	deadline := time.Now().Add(2 * time.Second)
	for !tag.NextReady && time.Now().Before(deadline) {
		_, h = health("/id/health?biz_tag=order")
		tag = h.Tags[0]
	}
	store.down.Store(true)
	status, h = health("/id/health")
	if status != 200 || h.Status != httpapi.StatusDegraded || h.Database.Reachable {
		t.Fatalf("db down, buffers full: %d %+v", status, h)
	}
	for range 17 { // the rest of [1,10] and all of [11,20]
		if status, _, body := get(t, srv, "/id?biz_tag=order"); status != 200 {
			t.Fatalf("serving from memory: %d %s", status, body)
		}
	}
	start := time.Now()
	status, hdr, body := get(t, srv, "/id?biz_tag=order")
	if status != 503 || hdr.Get("Retry-After") == "" || errorCode(t, body) != wire.CodeUnavailable {
		t.Fatalf("dry: %d %v %s", status, hdr, body)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("503 took %v: not fail-fast", d)
	}
	status, h = health("/id/health")
	if status != 503 || h.Status != httpapi.StatusUnavailable || h.Tags[0].Serving || h.Tags[0].LoadFailures == 0 {
		t.Fatalf("dry health: %d %+v", status, h)
	}
}

func TestServer_Recoverer(t *testing.T) {
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: panicking{}, Logger: testlog.Discard()})))
	defer srv.Close()
	status, _, body := get(t, srv, "/id?biz_tag=order")
	if status != 500 || errorCode(t, body) != wire.CodeInternal || strings.Contains(string(body), "goroutine") {
		t.Fatalf("panic: %d %s", status, body)
	}
}

type panicking struct{ httpapi.Allocator }

func (panicking) Next(context.Context, string) (int64, error) { panic("boom") }

// FuzzRequest sends arbitrary queries: the server never panics, always
// answers JSON with a known status, and a 200 carries a positive ID.
func FuzzRequest(f *testing.F) {
	for _, seed := range []string{
		"biz_tag=order", "biz_tag=order&count=5", "biz_tag=", "count=-1&biz_tag=order",
		"biz_tag=%00", "biz_tag=order&count=99999999999999999999", "biz_tag=a:b.c-d_e", "%zz",
		"b" + strings.Repeat("3", maxQueryBytes) + "iz_tag=a:b.c-d_e",
	} {
		f.Add("/id", seed)
		f.Add("/ids", seed)
		f.Add("/id/health", seed)
	}
	srv, _ := newServer(f)
	h := srv.Config.Handler
	f.Fuzz(func(t *testing.T, path, query string) {
		if path != "/id" && path != "/ids" && path != "/id/health" {
			path = "/id"
		}
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL.Path, req.URL.RawQuery = path, query
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch {
		case rec.Code == 200, rec.Code == 400, rec.Code == 404, rec.Code == 503:
		case rec.Code == 414 && len(query) > maxQueryBytes:
			// Refused before parsing: the query is over the limit.
		default:
			t.Fatalf("%s?%s: status %d: %s", truncate(path), truncate(query), rec.Code, truncate(rec.Body.String()))
		}
		if rec.Header().Get("Content-Type") != "application/json" || !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s?%s: not JSON: %q", path, query, rec.Body)
		}
		if rec.Code != 200 || path == "/id/health" {
			return
		}
		var body struct {
			ID  string   `json:"id"`
			IDs []string `json:"ids"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s?%s: %v: %s", path, query, err, rec.Body)
		}
		ids := body.IDs
		if path == "/id" {
			ids = []string{body.ID}
		}
		if len(ids) == 0 {
			t.Fatalf("%s?%s: 200 without an id: %s", path, query, rec.Body)
		}
		prev := int64(0)
		for _, s := range ids {
			id, err := strconv.ParseInt(s, 10, 64)
			if err != nil || id <= prev {
				t.Fatalf("%s?%s: id %q after %d, want positive and increasing: %s", path, query, s, prev, rec.Body)
			}
			prev = id
		}
	})
}

// maxQueryBytes is the server's default bound on a query string
// (Limits.MaxQueryBytes); a longer one is refused with 414.
const maxQueryBytes = 2048

// truncate shortens what a failing fuzz case prints.
func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
