package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/allocator/sqlite"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/migrations"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// adminStore is a store with tags and tokens: postgres or sqlite.
type adminStore = allocator.Store

// stores returns a migrated PostgreSQL database and a migrated SQLite file,
// each with the tags given (name → step).
func stores(t *testing.T) map[string]func(t *testing.T) adminStore {
	return map[string]func(t *testing.T) adminStore{
		"postgres": func(t *testing.T) adminStore {
			pg, _ := pgstore.New(t)
			return pg
		},
		"sqlite": func(t *testing.T) adminStore {
			ctx := context.Background()
			s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "idmint.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if _, err := migrations.Up(ctx, s.DB(), migrations.SQLite, nil); err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

// tokenInstance is idmint over store with the access control of auth.
type tokenInstance struct {
	srv     *httptest.Server
	store   adminStore
	metrics *httpapi.Metrics
}

func newTokenInstance(t *testing.T, store adminStore, auth httpapi.AuthConfig, limits httpapi.Limits) *tokenInstance {
	t.Helper()
	return newTokenInstanceWith(t, store, auth, limits, nil)
}

// newTokenInstanceWith is newTokenInstance with the config changed by
// edit (nil: as is) before the server is made.
func newTokenInstanceWith(t *testing.T, store adminStore, auth httpapi.AuthConfig, limits httpapi.Limits, edit func(*httpapi.Config)) *tokenInstance {
	t.Helper()
	metrics := httpapi.NewMetrics()
	a := allocator.New(allocator.Config{
		Store: store, Instance: "auth", Logger: testlog.Discard(), CatalogInterval: 100 * time.Millisecond,
		Segment: segment.Config{LoadTimeout: 5 * time.Second, WaitTimeout: 5 * time.Second, OnLoad: metrics.ObserveLoad},
	})
	t.Cleanup(func() { a.Close(context.Background()) })
	auth.Tokens = store
	auth.Refresh = 50 * time.Millisecond
	cfg := httpapi.Config{
		Allocator: a, Instance: "auth", Logger: testlog.Discard(), Metrics: metrics, MaxCount: 1000,
		Auth: auth, Limits: limits, Admin: store, TokenAdmin: store,
	}
	if edit != nil {
		edit(&cfg)
	}
	srv := validated(httptest.NewServer(httpapi.NewServer(cfg)))
	t.Cleanup(srv.Close)
	return &tokenInstance{srv: srv, store: store, metrics: metrics}
}

// newToken creates a token with scopes and returns its bearer string.
func newToken(t *testing.T, store token.Store, name string, scopes ...string) (token.Token, string) {
	t.Helper()
	tok, bearer, err := token.New(name, scopes)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err = store.CreateToken(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	return tok, bearer
}

// do sends a request with an optional bearer token and JSON body.
func do(t *testing.T, srv *httptest.Server, method, path, bearer string, body any) (int, http.Header, []byte) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header, out.Bytes()
}

// TestAuth_Scopes: in the token mode, every route answers 401 with a
// challenge to a missing, malformed, unknown, wrong or revoked token, 403
// to a token outside its scope, and serves a token inside it; on
// PostgreSQL and SQLite.
func TestAuth_Scopes(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			for _, tag := range []string{"order", "orderline", "user", "preorder"} {
				if _, err := store.CreateTag(context.Background(), allocator.TagSpec{Name: tag, Step: 10}); err != nil {
					t.Fatal(err)
				}
			}
			p := newTokenInstance(t, store, httpapi.AuthConfig{IDs: httpapi.AuthToken, ProtectMonitoring: true}, httpapi.Limits{})
			_, admin := newToken(t, store, "ops", "admin")
			_, all := newToken(t, store, "all-ids", "ids")
			_, order := newToken(t, store, "order-only", "ids:order")
			_, prefix := newToken(t, store, "order-prefix", "ids:order*")
			_, monitor := newToken(t, store, "prometheus", "monitor")
			revokedTok, revoked := newToken(t, store, "gone", "ids", "admin")
			if _, err := store.RevokeToken(context.Background(), revokedTok.ID); err != nil {
				t.Fatal(err)
			}
			// Same ID, another secret.
			wrong := revoked[:len(revoked)-4] + "AAAA"
			_, other := newToken(t, store, "other", "ids")
			wrongSecret := other[:len(other)-4] + "AAAA"
			if wrongSecret == other {
				wrongSecret = other[:len(other)-4] + "BBBB"
			}

			tests := []struct {
				name, method, path, bearer string
				status                     int
				code                       string
			}{
				{"no token", "GET", "/id?biz_tag=order", "", 401, wire.CodeUnauthorized},
				{"malformed", "GET", "/id?biz_tag=order", "hello", 401, wire.CodeUnauthorized},
				{"unknown", "GET", "/id?biz_tag=order", "idm_aaaaaaaaaaaaaaaa_" + strings.Repeat("x", 43), 401, wire.CodeUnauthorized},
				{"wrong secret", "GET", "/id?biz_tag=order", wrongSecret, 401, wire.CodeUnauthorized},
				{"revoked", "GET", "/id?biz_tag=order", revoked, 401, wire.CodeUnauthorized},
				{"revoked other secret", "GET", "/id?biz_tag=order", wrong, 401, wire.CodeUnauthorized},
				{"all ids", "GET", "/id?biz_tag=user", all, 200, ""},
				{"named tag", "GET", "/ids?biz_tag=order&count=3", order, 200, ""},
				{"named tag, other tag", "GET", "/id?biz_tag=orderline", order, 403, wire.CodeForbidden},
				{"named tag, encoded other tag", "GET", "/id?biz_tag=%75ser", order, 403, wire.CodeForbidden},
				{"prefix", "GET", "/id?biz_tag=orderline", prefix, 200, ""},
				{"prefix, other tag", "GET", "/id?biz_tag=user", prefix, 403, wire.CodeForbidden},
				// ids:order* is a prefix: a tag that only contains it is
				// another tag.
				{"prefix, tag containing it", "GET", "/id?biz_tag=preorder", prefix, 403, wire.CodeForbidden},
				{"prefix, tag containing it, ids", "GET", "/ids?biz_tag=preorder&count=2", prefix, 403, wire.CodeForbidden},
				{"named tag, tag twice", "GET", "/id?biz_tag=order&biz_tag=user", order, 400, wire.CodeInvalidTag},
				{"admin is not ids", "GET", "/id?biz_tag=order", admin, 403, wire.CodeForbidden},
				{"monitor is not ids", "GET", "/id?biz_tag=order", monitor, 403, wire.CodeForbidden},
				{"admin without token", "GET", "/v1/tags", "", 401, wire.CodeUnauthorized},
				{"admin with ids", "GET", "/v1/tags", all, 403, wire.CodeForbidden},
				{"admin", "GET", "/v1/tags", admin, 200, ""},
				{"health without token", "GET", "/id/health", "", 401, wire.CodeUnauthorized},
				{"health with ids", "GET", "/id/health", all, 403, wire.CodeForbidden},
				{"health with monitor", "GET", "/id/health", monitor, 200, ""},
				{"metrics with monitor", "GET", "/metrics", monitor, 200, ""},
				{"metrics with admin", "GET", "/metrics", admin, 200, ""},
				{"metrics without token", "GET", "/metrics", "", 401, wire.CodeUnauthorized},
				{"openapi is open", "GET", "/openapi.yaml", "", 200, ""},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					status, hdr, body := do(t, p.srv, tt.method, tt.path, tt.bearer, nil)
					if status != tt.status {
						t.Fatalf("status %d, want %d: %s", status, tt.status, body)
					}
					if tt.code != "" {
						if code := errorCode(t, body); code != tt.code {
							t.Fatalf("code %q, want %q", code, tt.code)
						}
					}
					if c := hdr.Get("WWW-Authenticate"); (status == 401) != strings.HasPrefix(c, "Bearer ") {
						t.Fatalf("status %d with WWW-Authenticate %q", status, c)
					}
					if len(tt.bearer) > 20 && strings.Contains(string(body), tt.bearer[20:]) {
						t.Fatalf("reply echoes the token: %s", body)
					}
				})
			}

			// A revocation takes effect without a restart.
			tok, bearer := newToken(t, store, "soon-gone", "ids")
			testutil.Eventually(t, 10*time.Second, "new token accepted", func() bool {
				s, _, _ := do(t, p.srv, "GET", "/id?biz_tag=order", bearer, nil)
				return s == 200
			})
			if _, err := store.RevokeToken(context.Background(), tok.ID); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 10*time.Second, "revoked token refused", func() bool {
				s, _, _ := do(t, p.srv, "GET", "/id?biz_tag=order", bearer, nil)
				return s == 401
			})
			if _, err := store.RevokeToken(context.Background(), "aaaaaaaaaaaaaaaa"); !errors.Is(err, token.ErrUnknown) {
				t.Fatalf("revoke unknown: %v", err)
			}
			tokens, err := store.ListTokens(context.Background())
			if err != nil || len(tokens) != 8 {
				t.Fatalf("ListTokens = %d tokens, %v; want 8", len(tokens), err)
			}
			for _, tk := range tokens {
				if len(tk.Hash) != 32 || tk.CreatedAt.IsZero() {
					t.Fatalf("stored token %+v", tk)
				}
			}
		})
	}
}

// TestAuth_TokenRate: a token's own rate is stored and read back by every
// store, unset reads as 0 (the instance's bound), and a rate no limiter can
// mean is refused before anything is written.
func TestAuth_TokenRate(t *testing.T) {
	all := stores(t)
	all["memory"] = func(*testing.T) adminStore { return memstore.New() }
	for name, open := range all {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := open(t)
			rated := rateToken(t, store, "rated", 250.5)
			newToken(t, store, "plain", "ids")
			tokens, err := store.ListTokens(ctx)
			if err != nil || len(tokens) != 2 {
				t.Fatalf("ListTokens = %v, %v", tokens, err)
			}
			got := map[string]float64{}
			for _, tk := range tokens {
				got[tk.Name] = tk.IDsPerSecond
			}
			if got["rated"] != 250.5 || got["plain"] != 0 {
				t.Fatalf("rates read back %v, want rated 250.5 and plain 0", got)
			}
			id, _, _ := token.Parse(rated)
			if tk, err := store.RevokeToken(ctx, id); err != nil || tk.IDsPerSecond != 250.5 {
				t.Fatalf("RevokeToken = %+v, %v", tk, err)
			}
			for _, bad := range []float64{-1, math.NaN(), math.Inf(1), 2e12} {
				tok, _, err := token.New("bad", []string{"ids"})
				if err != nil {
					t.Fatal(err)
				}
				tok.IDsPerSecond = bad
				if _, err := store.CreateToken(ctx, tok); err == nil {
					t.Fatalf("rate %v accepted", bad)
				}
			}
			if tokens, _ := store.ListTokens(ctx); len(tokens) != 2 {
				t.Fatalf("%d tokens after the refusals, want 2", len(tokens))
			}
		})
	}
}

// failingTokens is a token store that cannot be reached.
type failingTokens struct{ calls atomic.Int64 }

func (f *failingTokens) ListTokens(context.Context) ([]token.Token, error) {
	f.calls.Add(1)
	return nil, errors.New("dial tcp 10.0.0.9:5432: connect: connection refused")
}

// TestAuth_TokensUnreadable: when the tokens cannot be read, a request with
// a token is a 503 with Retry-After (not a 401 that would make a client
// drop a good token), and the store is asked once per refresh interval,
// not once per request.
func TestAuth_TokensUnreadable(t *testing.T) {
	a := orderAllocator(t, memstore.New())
	tokens := &failingTokens{}
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(),
		Auth: httpapi.AuthConfig{Tokens: tokens, IDs: httpapi.AuthToken, Refresh: time.Hour}})))
	t.Cleanup(srv.Close)
	_, bearer, _ := token.New("x", []string{"ids"})
	for range 50 {
		s, hdr, body := do(t, srv, "GET", "/id?biz_tag=order", bearer, nil)
		if s != 503 || hdr.Get("Retry-After") == "" || errorCode(t, body) != wire.CodeUnavailable || strings.Contains(string(body), "10.0.0.9") {
			t.Fatalf("%d %s", s, body)
		}
	}
	if n := tokens.calls.Load(); n != 1 {
		t.Fatalf("50 requests read the tokens %d times, want 1", n)
	}
}

// TestAuth_Segments: in the token mode, POST /v1/segments needs a token
// whose scope covers the body's tag.
func TestAuth_Segments(t *testing.T) {
	store := stores(t)["sqlite"](t)
	for _, tag := range []string{"order", "user"} {
		if _, err := store.CreateTag(context.Background(), allocator.TagSpec{Name: tag, Step: 10}); err != nil {
			t.Fatal(err)
		}
	}
	p := newTokenInstance(t, store, httpapi.AuthConfig{IDs: httpapi.AuthToken}, httpapi.Limits{})
	_, order := newToken(t, store, "order-only", "ids:order")
	_, other := newToken(t, store, "another", "ids:order")
	body := func(tag string) map[string]any {
		return map[string]any{"biz_tag": tag, "request_id": "0197a3b2-7c4d-7e5f-8a9b-0c1d2e3f4a5b", "size": 10,
			"holder_key": "the-order-only-tokens-holder-key"}
	}
	if s, _, b := do(t, p.srv, "POST", "/v1/segments", "", body("order")); s != 401 {
		t.Fatalf("no token: %d %s", s, b)
	}
	if s, _, b := do(t, p.srv, "POST", "/v1/segments", order, body("user")); s != 403 || errorCode(t, b) != wire.CodeForbidden {
		t.Fatalf("other tag: %d %s", s, b)
	}
	if s, _, b := do(t, p.srv, "POST", "/v1/segments", order, body("order")); s != 200 {
		t.Fatalf("own tag: %d %s", s, b)
	}
	// Another token with the request ID and even the holder key: the
	// request is the first token's, and stays so.
	if s, _, b := do(t, p.srv, "POST", "/v1/segments", other, body("order")); s != 409 || errorCode(t, b) != wire.CodeNotHolder {
		t.Fatalf("another token's retry: %d %s; want 409 %s", s, b, wire.CodeNotHolder)
	}
	back := map[string]any{"biz_tag": "order", "request_id": "0197a3b2-7c4d-7e5f-8a9b-0c1d2e3f4a5b",
		"holder_key": "the-order-only-tokens-holder-key", "first": "5", "last": "10"}
	if s, _, b := do(t, p.srv, "POST", "/v1/segments/giveback", other, back); s != 409 || errorCode(t, b) != wire.CodeNotHolder {
		t.Fatalf("another token's give-back: %d %s; want 409 %s", s, b, wire.CodeNotHolder)
	}
	if s, _, b := do(t, p.srv, "POST", "/v1/segments/giveback", order, back); s != 200 || !strings.Contains(string(b), `"given_back":true`) {
		t.Fatalf("the holder's give-back: %d %s", s, b)
	}
	// Refused by the body's tag, after the middleware let the token in:
	// counted as the middleware's refusals are.
	if n := refused(t, p.srv.URL, wire.CodeForbidden); n != 1 {
		t.Fatalf("idmint_http_refused_total{code=forbidden} = %d, want 1", n)
	}
}

// outageTokens is a token store an outage can take away, and whose rows a
// test edits (a revocation, a lagging replica).
type outageTokens struct {
	mu     sync.Mutex // protects tokens and down
	tokens []token.Token
	down   bool
}

func (o *outageTokens) ListTokens(context.Context) ([]token.Token, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		return nil, errors.New("token store unreachable")
	}
	return append([]token.Token(nil), o.tokens...), nil
}

// set replaces the rows and the outage state.
func (o *outageTokens) set(down bool, tokens ...token.Token) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down, o.tokens = down, tokens
}

// TestAuth_RevokedDuringOutage: a revocation takes effect within MaxStale
// whatever happens to the token store. While the store cannot be read, the
// copy of the tokens serves for MaxStale after the last successful read,
// then every token gets 503 (the store cannot tell: not 401); a token once
// seen revoked gets 401 for good, even when a later read (a lagging
// replica) shows it unrevoked, and even during an outage.
func TestAuth_RevokedDuringOutage(t *testing.T) {
	a := orderAllocator(t, memstore.New())
	// The instance's clock stands still but for advance; it starts at the
	// real time, as the request deadlines are taken from it.
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	advance := func(d time.Duration) { now.Add(int64(d)) }
	keep, keepBearer, _ := token.New("keep", []string{"ids"})
	gone, goneBearer, _ := token.New("gone", []string{"ids"})
	revoked := gone
	at := time.Unix(0, now.Load())
	revoked.RevokedAt = &at
	store := &outageTokens{}
	store.set(false, keep, gone)
	const refresh, maxStale = time.Second, 10 * time.Second
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(),
		Now:  func() time.Time { return time.Unix(0, now.Load()) },
		Auth: httpapi.AuthConfig{Tokens: store, IDs: httpapi.AuthToken, Refresh: refresh, MaxStale: maxStale}})))
	t.Cleanup(srv.Close)
	expect := func(step, bearer string, want int) {
		t.Helper()
		s, hdr, body := do(t, srv, "GET", "/id?biz_tag=order", bearer, nil)
		if s != want {
			t.Fatalf("%s: %d %s, want %d", step, s, body, want)
		}
		if s == 503 && (hdr.Get("Retry-After") == "" || errorCode(t, body) != wire.CodeUnavailable) {
			t.Fatalf("%s: a 503 without Retry-After or code %s: %s", step, wire.CodeUnavailable, body)
		}
	}
	expect("store up", keepBearer, 200)
	expect("store up", goneBearer, 200)

	// "gone" is revoked, and the store goes away before this instance
	// reads it again: the copy serves, up to MaxStale after its read.
	store.set(true, keep, revoked)
	advance(refresh + time.Millisecond)
	expect("outage, within the bound", goneBearer, 200)
	advance(maxStale - refresh - 2*time.Millisecond)
	expect("outage, at the bound", keepBearer, 200)
	advance(2 * time.Millisecond)
	expect("outage, past the bound", keepBearer, 503)
	expect("outage, past the bound", goneBearer, 503)

	// The store is back: the revocation is seen.
	store.set(false, keep, revoked)
	advance(refresh)
	expect("store back", keepBearer, 200)
	expect("store back", goneBearer, 401)

	// A lagging replica shows the token unrevoked: still refused.
	store.set(false, keep, gone)
	advance(refresh)
	expect("lagging replica", keepBearer, 200)
	expect("lagging replica", goneBearer, 401)

	// Another outage, past the bound: the revoked token is known for what
	// it is (401), the others cannot be checked (503).
	store.set(true)
	advance(maxStale + refresh)
	expect("second outage", goneBearer, 401)
	expect("second outage", keepBearer, 503)
}
