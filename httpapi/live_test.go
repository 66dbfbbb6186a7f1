package httpapi_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
)

// TestServer_Live: /id/live answers 200 {"status":"alive"} over real HTTP
// while the database is down and /id/health says 503, with no token even
// where every other route asks for one, and tells nothing more: a liveness
// probe on it can never restart an instance for a database outage.
func TestServer_Live(t *testing.T) {
	open := func(t *testing.T) (*httptest.Server, *switchableStore) { return newServer(t) }
	protected := func(t *testing.T) (*httptest.Server, *switchableStore) {
		m := memstore.New()
		if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10}); err != nil {
			t.Fatal(err)
		}
		store := &switchableStore{Store: m}
		p := newTokenInstance(t, store, httpapi.AuthConfig{IDs: httpapi.AuthToken, ProtectMonitoring: true}, httpapi.Limits{})
		return p.srv, store
	}
	tests := []struct {
		name string
		// health is what /id/health answers with the database down.
		health int
		start  func(t *testing.T) (*httptest.Server, *switchableStore)
	}{
		{"open", 503, open},
		{"auth token, monitoring protected", 401, protected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, store := tt.start(t)
			store.down.Store(true)
			if status, _, body := get(t, srv, "/id/health"); status != tt.health {
				t.Fatalf("/id/health with the database down: %d %s, want %d", status, body, tt.health)
			}
			for range 3 {
				status, hdr, body := get(t, srv, "/id/live")
				if status != 200 || hdr.Get("Content-Type") != "application/json" || string(body) != `{"status":"alive"}`+"\n" {
					t.Fatalf("/id/live with the database down: %d %s %q", status, hdr.Get("Content-Type"), body)
				}
			}
		})
	}
}
