package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/wire"
)

// TestClient_RefusalsFinal: a refusal no retry can change (401, 403, 404,
// 400) is returned as itself, after exactly one request, and never matches
// ErrUnavailable: a caller that retries on ErrUnavailable, as a caller of a
// client should, does not retry it forever. The message says the tag, and
// for a 403 the scope it needs.
func TestClient_RefusalsFinal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memstore.New()
	if _, err := store.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 100}); err != nil {
		t.Fatal(err)
	}
	all, allBearer := mustToken(t, "ids")
	narrow, narrowBearer := mustToken(t, "ids:user")
	_, unknown := mustToken(t, "ids")
	a := allocator.New(allocator.Config{Store: store, Logger: testlog.Discard()})
	t.Cleanup(func() { a.Close(context.Background()) })
	api := &counting{next: httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(),
		Auth: httpapi.AuthConfig{IDs: httpapi.AuthToken, Tokens: tokenList{all, narrow}}})}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)

	// A stand-in instance that answers every request 400, as one whose
	// rules for a request differ from the client's would.
	bad := &counting{next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e wire.ErrorBody
		e.Error.Code, e.Error.Message = wire.CodeBadRequest, "size: want at most 1000"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(e)
	})}
	badSrv := httptest.NewServer(bad)
	t.Cleanup(badSrv.Close)

	for _, tc := range []struct {
		name, token, tag string
		inst             *counting
		url              string
		want             error
		says             []string
	}{
		{"tag outside the token's scope", narrowBearer, "order", api, srv.URL, client.ErrForbidden, []string{`"order"`, "ids:order"}},
		{"refused token", unknown, "order", api, srv.URL, client.ErrUnauthorized, []string{`"order"`, "invalid or revoked"}},
		{"unknown tag", allBearer, "invoice", api, srv.URL, client.ErrUnknownTag, []string{`"invoice"`}},
		{"bad request", allBearer, "order", bad, badSrv.URL, nil, []string{`"order"`, "400", "size: want at most 1000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(what string, err error, requests int64) {
				t.Helper()
				var refused *client.APIError
				switch {
				case tc.want != nil && !errors.Is(err, tc.want):
					t.Fatalf("%s: %v; want %v", what, err, tc.want)
				case tc.want == nil && (!errors.As(err, &refused) || refused.Status != http.StatusBadRequest):
					t.Fatalf("%s: %v; want the instance's 400", what, err)
				case errors.Is(err, client.ErrUnavailable):
					t.Fatalf("%s: %v matches ErrUnavailable: a caller retrying on it retries a final refusal forever", what, err)
				case requests != 1:
					t.Fatalf("%s: the refusal cost %d requests, want exactly 1", what, requests)
				case strings.Contains(err.Error(), tc.token):
					t.Fatalf("%s: the error says the token: %v", what, err)
				}
				for _, s := range tc.says {
					if !strings.Contains(err.Error(), s) {
						t.Fatalf("%s: %q does not say %s", what, err, s)
					}
				}
			}
			var logs testlog.Buffer
			cfg := client.Config{URLs: []string{tc.url}, Token: tc.token, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			// The client's own log gives a refusal no retry hint either.
			defer func() {
				if strings.Contains(logs.String(), "retry in") {
					t.Errorf("the client logged a retry hint for a final refusal:\n%s", logs.String())
				}
			}()

			before := tc.inst.requests.Load()
			_, err := client.New(ctx, withTags(cfg, tc.tag))
			check("New", err, tc.inst.requests.Load()-before)

			c, err := client.New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			before = tc.inst.requests.Load()
			_, err = c.Next(ctx, tc.tag)
			check("Next", err, tc.inst.requests.Load()-before)
			// Asked again at once: answered from memory, no request.
			before = tc.inst.requests.Load()
			_, err = c.NextN(ctx, tc.tag, 10)
			if n := tc.inst.requests.Load() - before; n > 1 {
				t.Fatalf("NextN right after: %d requests", n)
			}
			check("NextN right after", err, 1)
		})
	}
}
