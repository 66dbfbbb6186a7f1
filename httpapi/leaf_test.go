package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/lease"
	"github.com/idmint/idmint/segment"
)

// newLeafServer serves Leaf's routes (or not) over store, with Snowflake.
func newLeafServer(t *testing.T, store allocator.Store, leaf bool, edit func(*httpapi.Config)) *httptest.Server {
	t.Helper()
	a := allocator.New(allocator.Config{Store: store, Logger: testlog.Discard(), RetryMin: time.Millisecond, RetryMax: time.Millisecond,
		Segment: segment.Config{LoadTimeout: 50 * time.Millisecond, WaitTimeout: 200 * time.Millisecond, MinBackoff: time.Hour}})
	t.Cleanup(func() { a.Close(context.Background()) })
	cfg := httpapi.Config{Allocator: a, Logger: testlog.Discard(), LeafRoutes: leaf,
		Snowflake: startNode(t, lease.NewMemory(nil), "leaf")}
	if edit != nil {
		edit(&cfg)
	}
	srv := validated(httptest.NewServer(httpapi.NewServer(cfg)))
	t.Cleanup(srv.Close)
	return srv
}

// TestLeafRoutes: Leaf's routes answer as Leaf does (the bare number; a
// failure Leaf knows as a 500 with its Result), from the same IDs as GET
// /id, behind the same access control, and not at all with LeafRoutes off.
func TestLeafRoutes(t *testing.T) {
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "user", Step: 10}); err != nil {
		t.Fatal(err)
	}
	store := &switchableStore{Store: m}
	srv := newLeafServer(t, store, true, nil)

	var last int64
	for i := range 3 {
		status, h, body := get(t, srv, "/api/segment/get/order")
		id, err := strconv.ParseInt(string(body), 10, 64)
		if status != http.StatusOK || err != nil || h.Get("Content-Type") != "text/plain; charset=utf-8" || id <= last {
			t.Fatalf("call %d: %d %q %q, want an ID above %d as bare text", i, status, h.Get("Content-Type"), body, last)
		}
		last = id
	}
	// The same IDs as GET /id: the next one follows.
	status, _, body := get(t, srv, "/id?biz_tag=order", "Accept", "text/plain")
	if next, err := strconv.ParseInt(string(body[:len(body)-1]), 10, 64); status != 200 || err != nil || next != last+1 {
		t.Fatalf("GET /id after Leaf's route: %d %q, want %d", status, body, last+1)
	}
	if status, _, body := get(t, srv, "/api/snowflake/get/anything"); status != 200 {
		t.Fatalf("Leaf's snowflake route: %d %q", status, body)
	} else if _, err := strconv.ParseInt(string(body), 10, 64); err != nil {
		t.Fatalf("Leaf's snowflake route: %q is no number", body)
	}

	tests := []struct {
		name, path string
		down       bool
		status     int
		body, code string
	}{
		{"an unknown key", "/api/segment/get/nosuch", false, 500, "Result{id=-2, status=EXCEPTION}", "unknown_tag"},
		{"a name idmint refuses", "/api/segment/get/no%20spaces", false, 400, "", "invalid_biz_tag"},
		{"no ID to be had", "/api/segment/get/user", true, 500, "Result{id=-3, status=EXCEPTION}", "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store.down.Store(tt.down)
			defer store.down.Store(false)
			status, h, body := get(t, srv, tt.path)
			if status != tt.status || h.Get("X-Idmint-Error") != tt.code || tt.body != "" && string(body) != tt.body {
				t.Fatalf("%d %q (X-Idmint-Error %q), want %d %q (%q)", status, body, h.Get("X-Idmint-Error"), tt.status, tt.body, tt.code)
			}
		})
	}

	t.Run("behind the same tokens", func(t *testing.T) {
		tokens := memstore.New()
		if _, err := tokens.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10}); err != nil {
			t.Fatal(err)
		}
		_, userOnly := newToken(t, tokens, "user-only", "ids:user")
		srv := newLeafServer(t, tokens, true, func(c *httpapi.Config) {
			c.Auth = httpapi.AuthConfig{IDs: httpapi.AuthToken, Tokens: tokens, Refresh: 50 * time.Millisecond}
		})
		if status, h, body := get(t, srv, "/api/segment/get/order"); status != 401 || h.Get("X-Idmint-Error") != "unauthorized" {
			t.Fatalf("no token: %d %q", status, body)
		}
		if status, h, body := get(t, srv, "/api/segment/get/order", "Authorization", "Bearer "+userOnly); status != 403 || h.Get("X-Idmint-Error") != "forbidden" {
			t.Fatalf("a token without the tag's scope: %d %q", status, body)
		}
	})

	t.Run("off", func(t *testing.T) {
		srv := newLeafServer(t, memstore.New(), false, nil)
		if status, _, body := get(t, srv, "/api/segment/get/order"); status != 404 {
			t.Fatalf("with LeafRoutes off: %d %q", status, body)
		}
	})
}
