package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/token"
)

// tokenList is a fixed token store.
type tokenList []token.Token

func (l tokenList) ListTokens(context.Context) ([]token.Token, error) { return l, nil }

// counting counts the range requests an instance receives and keeps the
// last Authorization header.
type counting struct {
	next     http.Handler
	requests atomic.Int64
	mu       sync.Mutex
	auth     string
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/v1/segments") {
		c.requests.Add(1)
		c.mu.Lock()
		c.auth = r.Header.Get("Authorization")
		c.mu.Unlock()
	}
	c.next.ServeHTTP(w, r)
}

func mustToken(t *testing.T, scopes ...string) (token.Token, string) {
	t.Helper()
	tok, bearer, err := token.New("app", scopes)
	if err != nil {
		t.Fatal(err)
	}
	return tok, bearer
}

// TestClient_TokenTLS: the client sends its token on every request, to an
// instance with --auth token that asks for client certificates; a refused
// token is ErrUnauthorized (or ErrForbidden outside its scope) after
// exactly one request, and no error says the token.
func TestClient_TokenTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memstore.New()
	if _, err := store.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 100}); err != nil {
		t.Fatal(err)
	}
	good, bearer := mustToken(t, "ids")
	narrow, narrowBearer := mustToken(t, "ids:user")
	_, unknown := mustToken(t, "ids")
	a := allocator.New(allocator.Config{Store: store, Logger: testlog.Discard()})
	t.Cleanup(func() { a.Close(context.Background()) })
	api := &counting{next: httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(),
		Auth: httpapi.AuthConfig{IDs: httpapi.AuthToken, Tokens: tokenList{good, narrow}}})}

	dir := t.TempDir()
	ca := testutil.NewCA(t, dir, "idmint")
	serverCert, serverKey := ca.Issue(t, dir, "server", 10, true)
	clientCert, clientKey := ca.Issue(t, dir, "client", 20, false)
	pair, err := tls.LoadX509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := client.LoadCertPool(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(api)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tlsConfig, err := client.LoadTLS(ca.File, clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := func(token string) client.Config {
		return client.Config{URLs: []string{srv.URL}, Token: token, TLS: tlsConfig, Logger: testlog.Discard()}
	}

	t.Run("served", func(t *testing.T) {
		c, err := client.New(ctx, withTags(cfg(bearer), "order"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if id, err := c.Next(ctx, "order"); err != nil || id < 1 {
			t.Fatalf("Next: %d, %v", id, err)
		}
		api.mu.Lock()
		defer api.mu.Unlock()
		if api.auth != "Bearer "+bearer {
			t.Fatalf("the instance saw Authorization %q", api.auth)
		}
	})

	for _, tc := range []struct {
		name, token string
		want        error
	}{
		{"unknown token", unknown, client.ErrUnauthorized},
		{"no token", "", client.ErrUnauthorized},
		{"outside its scope", narrowBearer, client.ErrForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := api.requests.Load()
			_, err := client.New(ctx, withTags(cfg(tc.token), "order"))
			if !errors.Is(err, tc.want) {
				t.Fatalf("New: %v, want %v", err, tc.want)
			}
			if n := api.requests.Load() - before; n != 1 {
				t.Fatalf("the refusal cost %d requests, want exactly 1", n)
			}
			if tc.token != "" && strings.Contains(err.Error(), tc.token) {
				t.Fatalf("the error says the token: %v", err)
			}

			// Next on a client without preloaded tags: one request too.
			c, err := client.New(ctx, cfg(tc.token))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			before = api.requests.Load()
			if _, err := c.Next(ctx, "order"); !errors.Is(err, tc.want) {
				t.Fatalf("Next: %v, want %v", err, tc.want)
			}
			if n := api.requests.Load() - before; n != 1 {
				t.Fatalf("the refused Next cost %d requests, want exactly 1", n)
			}
		})
	}

	t.Run("no client certificate", func(t *testing.T) {
		plain, err := client.LoadTLS(ca.File, "", "")
		if err != nil {
			t.Fatal(err)
		}
		c := cfg(bearer)
		c.TLS = plain
		c.Segment.WaitTimeout = time.Second
		if _, err := client.New(ctx, withTags(c, "order")); err == nil {
			t.Fatal("New without a client certificate succeeded")
		}
	})

	t.Run("TLS beside HTTPClient", func(t *testing.T) {
		c := cfg(bearer)
		c.HTTPClient = http.DefaultClient
		if _, err := client.New(ctx, c); err == nil {
			t.Fatal("New took both TLS and HTTPClient")
		}
	})
}

func withTags(c client.Config, tags ...string) client.Config {
	c.Tags = tags
	return c
}
