package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/testkit/testlog"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// strictJSON decodes body into v, refusing fields v does not have: a reply
// that grows a field (a hash, a secret) fails the test.
func strictJSON(tb testing.TB, body []byte, v any) {
	tb.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		tb.Fatalf("%s: %v", body, err)
	}
}

// listTokens is GET /v1/tokens, decoded strictly.
func listTokens(t *testing.T, p *tokenInstance, bearer string) ([]wire.Token, []byte) {
	t.Helper()
	s, _, body := do(t, p.srv, "GET", "/v1/tokens", bearer, nil)
	if s != 200 {
		t.Fatalf("list tokens: %d %s", s, body)
	}
	var list struct{ Tokens []wire.Token }
	strictJSON(t, body, &list)
	return list.Tokens, body
}

// TestAdmin_Tokens: the token admin API makes a token whose secret is in
// the create reply only (never in the list, the log or /metrics), which
// works at once for its scopes and nothing else; refuses bad settings
// without storing anything; revokes idempotently, at once; on PostgreSQL
// and SQLite.
func TestAdmin_Tokens(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			if _, err := store.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10}); err != nil {
				t.Fatal(err)
			}
			if _, err := store.CreateTag(context.Background(), allocator.TagSpec{Name: "user", Step: 10}); err != nil {
				t.Fatal(err)
			}
			var logs testlog.Buffer
			p := newTokenInstanceWith(t, store, httpapi.AuthConfig{IDs: httpapi.AuthToken}, httpapi.Limits{}, func(c *httpapi.Config) {
				c.AccessLog = true
				c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
				// No refresh during the test: "at once" is not "within
				// the refresh interval".
				c.Auth.Refresh = time.Hour
			})
			opsTok, admin := newToken(t, store, "ops", "admin")

			s, _, body := do(t, p.srv, "POST", "/v1/tokens", admin, map[string]any{"name": "billing", "scopes": []string{"ids:order"}, "ids_per_second": 500})
			if s != 201 {
				t.Fatalf("create: %d %s", s, body)
			}
			var created wire.CreatedToken
			strictJSON(t, body, &created)
			id, secret, ok := token.Parse(created.Secret)
			if !ok || id != created.Token.ID || created.Token.Name != "billing" || strings.Join(created.Token.Scopes, ",") != "ids:order" ||
				created.Token.IDsPerSecond != 500 || created.Token.CreatedAt.IsZero() || created.Token.RevokedAt != nil ||
				!strings.Contains(created.Note, "once") {
				t.Fatalf("create reply: %s", body)
			}

			// At once, with no wait for the refresh: its scope, and only it.
			for _, c := range []struct {
				method, path string
				status       int
			}{{"GET", "/id?biz_tag=order", 200}, {"GET", "/id?biz_tag=user", 403}, {"GET", "/v1/tokens", 403}, {"GET", "/v1/tags", 403}} {
				if s, _, body := do(t, p.srv, c.method, c.path, created.Secret, nil); s != c.status {
					t.Errorf("new token, %s %s: %d %s, want %d", c.method, c.path, s, body, c.status)
				}
			}

			list, listBody := listTokens(t, p, admin)
			hash := sha256.Sum256([]byte(secret))
			for _, leak := range []string{secret, created.Secret, hex.EncodeToString(hash[:]), base64.StdEncoding.EncodeToString(hash[:])} {
				if strings.Contains(string(listBody), leak) {
					t.Fatalf("the list shows the secret or its hash %q: %s", leak, listBody)
				}
			}
			byID := map[string]wire.Token{}
			for _, tj := range list {
				byID[tj.ID] = tj
			}
			if len(list) != 2 || byID[opsTok.ID].Name != "ops" || byID[id].IDsPerSecond != 500 || byID[id].RevokedAt != nil ||
				strings.Join(byID[id].Scopes, ",") != "ids:order" {
				t.Fatalf("list: %s", listBody)
			}

			for _, bad := range []struct {
				name string
				body any
				code string
			}{
				{"no name", map[string]any{"scopes": []string{"ids"}}, wire.CodeInvalidSpec},
				{"long name", map[string]any{"name": strings.Repeat("n", 101), "scopes": []string{"ids"}}, wire.CodeInvalidSpec},
				{"no scope", map[string]any{"name": "x", "scopes": []string{}}, wire.CodeInvalidSpec},
				{"bad scope", map[string]any{"name": "x", "scopes": []string{"root"}}, wire.CodeInvalidSpec},
				{"bad tag scope", map[string]any{"name": "x", "scopes": []string{"ids:no way"}}, wire.CodeInvalidSpec},
				{"negative rate", map[string]any{"name": "x", "scopes": []string{"ids"}, "ids_per_second": -1}, wire.CodeInvalidSpec},
				{"huge rate", map[string]any{"name": "x", "scopes": []string{"ids"}, "ids_per_second": 2e12}, wire.CodeInvalidSpec},
				{"unknown field", map[string]any{"name": "x", "scopes": []string{"ids"}, "hash": "00"}, wire.CodeInvalidJSON},
				{"not json", "admin please", wire.CodeInvalidJSON},
			} {
				if s, _, body := do(t, p.srv, "POST", "/v1/tokens", admin, bad.body); s != 400 || errorCode(t, body) != bad.code {
					t.Errorf("%s: %d %s, want 400 %s", bad.name, s, body, bad.code)
				}
			}
			if list, body := listTokens(t, p, admin); len(list) != 2 {
				t.Fatalf("a refused create stored a token: %s", body)
			}

			s, _, body = do(t, p.srv, "DELETE", "/v1/tokens/"+id, admin, nil)
			var revoked wire.Token
			strictJSON(t, body, &revoked)
			if s != 200 || revoked.ID != id || revoked.RevokedAt == nil {
				t.Fatalf("revoke: %d %s", s, body)
			}
			if s, _, body := do(t, p.srv, "GET", "/id?biz_tag=order", created.Secret, nil); s != 401 {
				t.Fatalf("revoked token at once: %d %s, want 401", s, body)
			}
			s, _, body = do(t, p.srv, "DELETE", "/v1/tokens/"+id, admin, nil)
			var again wire.Token
			strictJSON(t, body, &again)
			if s != 200 || again.RevokedAt == nil || !again.RevokedAt.Equal(*revoked.RevokedAt) {
				t.Fatalf("revoke again: %d %s, want 200 with the first revocation time", s, body)
			}
			if s, _, body := do(t, p.srv, "DELETE", "/v1/tokens/aaaaaaaaaaaaaaaa", admin, nil); s != 404 || errorCode(t, body) != wire.CodeUnknownToken {
				t.Fatalf("revoke unknown: %d %s", s, body)
			}
			// A whole token where its ID belongs is revoked, never quoted.
			leakedTok, leaked := newToken(t, store, "leaked", "ids")
			s, _, body = do(t, p.srv, "DELETE", "/v1/tokens/"+leaked, admin, nil)
			if s != 200 || strings.Contains(string(body), leaked[21:]) || !strings.Contains(string(body), leakedTok.ID) {
				t.Fatalf("revoke by the whole token: %d %s", s, body)
			}
			if s, _, _ := do(t, p.srv, "GET", "/id?biz_tag=order", leaked, nil); s != 401 {
				t.Fatalf("the token revoked by its whole string: %d, want 401", s)
			}

			// What the instance writes down never holds the secret.
			_, _, metrics := do(t, p.srv, "GET", "/metrics", admin, nil)
			for what, text := range map[string]string{"the log": logs.String(), "/metrics": string(metrics)} {
				if strings.Contains(text, secret) {
					t.Errorf("%s holds the secret", what)
				}
			}
			if !strings.Contains(logs.String(), `"token_id":"`+id+`"`) || !strings.Contains(logs.String(), "token created over the admin API") {
				t.Errorf("no log line names the token created: %s", logs.String())
			}
		})
	}
}

// TestAdmin_TokenScopes: only an admin token reaches the token routes; a
// monitor or ID token is 403 and changes nothing, no token is 401.
func TestAdmin_TokenScopes(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			p := newTokenInstance(t, store, httpapi.AuthConfig{IDs: httpapi.AuthToken, ProtectMonitoring: true}, httpapi.Limits{})
			_, admin := newToken(t, store, "ops", "admin")
			victim, _ := newToken(t, store, "victim", "ids")
			_, monitor := newToken(t, store, "prometheus", "monitor")
			_, ids := newToken(t, store, "app", "ids", "ids:order", "ids:o*")
			create := map[string]any{"name": "mine", "scopes": []string{"admin"}}
			for _, bearer := range []struct{ name, token string }{{"monitor", monitor}, {"ids", ids}, {"none", ""}} {
				want, code := 403, wire.CodeForbidden
				if bearer.token == "" {
					want, code = 401, wire.CodeUnauthorized
				}
				for _, r := range []struct {
					method, path string
					body         any
				}{{"GET", "/v1/tokens", nil}, {"POST", "/v1/tokens", create}, {"DELETE", "/v1/tokens/" + victim.ID, nil}} {
					s, _, body := do(t, p.srv, r.method, r.path, bearer.token, r.body)
					if s != want || errorCode(t, body) != code {
						t.Errorf("%s token, %s %s: %d %s, want %d", bearer.name, r.method, r.path, s, body, want)
					}
				}
			}
			list, body := listTokens(t, p, admin)
			if len(list) != 4 || strings.Contains(string(body), "revoked_at") {
				t.Fatalf("a refused request changed the tokens: %s", body)
			}
		})
	}
}

// flakyTokens is a token store whose reads fail while down is set.
type flakyTokens struct {
	token.Store
	down *atomic.Bool
}

func (f flakyTokens) ListTokens(ctx context.Context) ([]token.Token, error) {
	if f.down.Load() {
		return nil, errors.New("dial tcp: connection refused")
	}
	return f.Store.ListTokens(ctx)
}

// TestAdmin_RevokeDuringOutage: an admin token revoked through an instance
// is refused by it at once, even when its token reads fail from then on
// and its copy, not yet stale, still holds the token as valid.
func TestAdmin_RevokeDuringOutage(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			down := new(atomic.Bool)
			p := newTokenInstanceWith(t, store, httpapi.AuthConfig{}, httpapi.Limits{}, func(c *httpapi.Config) {
				c.Auth.Tokens = flakyTokens{Store: store, down: down}
				c.Auth.MaxStale = time.Hour
			})
			_, admin := newToken(t, store, "ops", "admin")
			stolenTok, stolen := newToken(t, store, "stolen", "admin")
			if s, _, body := do(t, p.srv, "GET", "/v1/tokens", stolen, nil); s != 200 {
				t.Fatalf("before: %d %s", s, body)
			}
			down.Store(true) // the copy holds both tokens as valid
			if s, _, body := do(t, p.srv, "DELETE", "/v1/tokens/"+stolenTok.ID, admin, nil); s != 200 {
				t.Fatalf("revoke: %d %s", s, body)
			}
			if s, _, body := do(t, p.srv, "GET", "/v1/tokens", stolen, nil); s != 401 {
				t.Fatalf("the revoked token while the token reads fail: %d %s, want 401", s, body)
			}
			if s, _, body := do(t, p.srv, "POST", "/v1/tokens", stolen, map[string]any{"name": "backdoor", "scopes": []string{"admin"}}); s != 401 {
				t.Fatalf("the revoked token makes a token: %d %s, want 401", s, body)
			}
		})
	}
}
