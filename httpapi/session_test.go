package httpapi_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/token"
)

// forgeSession makes a login session of tok ending at end, in the format
// of session.go: what the holder of tok (or a reader of the token table)
// can make without the login form.
func forgeSession(tok token.Token, end time.Time) string {
	e := strconv.FormatInt(end.Unix(), 10)
	m := hmac.New(sha256.New, tok.Hash)
	m.Write([]byte("idmint login session v1\x00" + tok.ID + "\x00" + e))
	return "v1." + tok.ID + "." + e + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// TestLogin_CookieNotASession: the monitoring routes themselves refuse a
// login cookie that is not a live session of a token whose only scope is
// monitor: a raw token of any scope (what another application on the host
// name, or an earlier version, may have set), a session of a token with
// other scopes (made by its holder), a session with a wrong MAC, anything
// else. Each is a 401 on every monitoring route, as no cookie is.
func TestLogin_CookieNotASession(t *testing.T) {
	store := stores(t)["sqlite"](t)
	p := newTokenInstance(t, store, httpapi.AuthConfig{ProtectMonitoring: true}, httpapi.Limits{})
	monTok, monitor := newToken(t, store, "browser", "monitor")
	adminTok, admin := newToken(t, store, "ops", "admin")
	wideTok, wide := newToken(t, store, "wide", "monitor", "ids")
	idsTok, ids := newToken(t, store, "shop", "ids:order")
	end := time.Now().Add(time.Hour)
	otherKey := monTok
	otherKey.Hash = adminTok.Hash

	refused := []struct{ name, value string }{
		{"a monitor token itself", monitor},
		{"an admin token itself", admin},
		{"a monitor and ids token itself", wide},
		{"an ids token itself", ids},
		{"a session of an admin token", forgeSession(adminTok, end)},
		{"a session of a monitor and ids token", forgeSession(wideTok, end)},
		{"a session of an ids token", forgeSession(idsTok, end)},
		{"a monitor session signed with another key", forgeSession(otherKey, end)},
		{"another application's value", "s%3Aj2mXk0abc.Fq9"},
	}
	// The format above is the server's: a session of the monitor token
	// opens the routes that take the cookie.
	for _, path := range []string{"/id/health", "/id/dashboard"} {
		if resp, body := send(t, p, "GET", path, "", "Cookie", httpapi.MonitorCookie+"="+forgeSession(monTok, end)); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s with a session of the monitor token: %d %.120s, want 200", path, resp.StatusCode, body)
		}
	}
	for _, tc := range refused {
		for _, path := range []string{"/id/health", "/id/dashboard", "/metrics"} {
			resp, body := send(t, p, "GET", path, "", "Cookie", httpapi.MonitorCookie+"="+tc.value)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s: GET %s with it as the login cookie: %d %.120s, want 401", tc.name, path, resp.StatusCode, body)
			}
		}
	}
}

// TestLogin_Session: the login cookie is a session of its token that holds
// no secret: the reply that sets it has neither the token nor its hash,
// and deletes the cookie of earlier versions, which held the token. It
// lasts its LoginSession and no longer, ends with its token's revocation
// (at once on the instance that revoked it, within a token refresh on the
// others), and works on every instance of the token store, while one with
// a shorter LoginSession ends it sooner.
func TestLogin_Session(t *testing.T) {
	const lifetime = time.Hour
	store := stores(t)["sqlite"](t)
	clock := newStepClock()
	instance := func(lifetime time.Duration) *tokenInstance {
		return newTokenInstanceWith(t, store, httpapi.AuthConfig{ProtectMonitoring: true, LoginSession: lifetime},
			httpapi.Limits{}, func(c *httpapi.Config) { c.Now = clock.now })
	}
	p := instance(lifetime)
	_, admin := newToken(t, store, "ops", "admin")
	login := func(t *testing.T) (token.Token, string) {
		t.Helper()
		tok, bearer := newToken(t, store, "browser", "monitor")
		clock.advance(time.Second) // the instance reads the new token
		resp, _ := send(t, p, "POST", "/id/login", "token="+url.QueryEscape(bearer))
		c := loginCookie(resp)
		if resp.StatusCode != http.StatusSeeOther || c == nil {
			t.Fatalf("login: %d, cookie %v", resp.StatusCode, c)
		}
		for _, h := range resp.Header.Values("Set-Cookie") {
			for _, secret := range []string{bearer, bearer[len(bearer)-43:], hex.EncodeToString(tok.Hash), base64.RawURLEncoding.EncodeToString(tok.Hash), base64.StdEncoding.EncodeToString(tok.Hash)} {
				if strings.Contains(h, secret) {
					t.Fatalf("Set-Cookie %q holds the token's secret or hash %q", h, secret)
				}
			}
		}
		return tok, c.Value
	}
	health := func(t *testing.T, p *tokenInstance, session string) int {
		t.Helper()
		resp, _ := send(t, p, "GET", "/id/health", "", "Cookie", httpapi.MonitorCookie+"="+session)
		return resp.StatusCode
	}

	t.Run("deletes the cookie that held the token", func(t *testing.T) {
		_, bearer := newToken(t, store, "old", "monitor")
		clock.advance(time.Second)
		resp, _ := send(t, p, "POST", "/id/login", "token="+url.QueryEscape(bearer))
		var deleted bool
		for _, c := range resp.Cookies() {
			deleted = deleted || c.Name == "idmint_monitor" && c.Path == "/" && c.MaxAge < 0
		}
		if !deleted {
			t.Fatalf("the login does not delete the earlier cookie idmint_monitor at Path=/: %v", resp.Header.Values("Set-Cookie"))
		}
	})

	t.Run("ends at its end", func(t *testing.T) {
		_, session := login(t)
		clock.advance(lifetime - time.Second)
		if s := health(t, p, session); s != http.StatusOK {
			t.Fatalf("a second before its end: %d, want 200", s)
		}
		clock.advance(2 * time.Second)
		if s := health(t, p, session); s != http.StatusUnauthorized {
			t.Fatalf("a second after its end: %d, want 401", s)
		}
		resp, _ := send(t, p, "GET", "/id/dashboard", "", "Cookie", httpapi.MonitorCookie+"="+session, "Accept", "text/html")
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "login" {
			t.Fatalf("the dashboard with an ended session: %d Location %q, want 303 to login", resp.StatusCode, resp.Header.Get("Location"))
		}
	})

	t.Run("every instance of the store takes it", func(t *testing.T) {
		_, session := login(t)
		if s := health(t, instance(lifetime), session); s != http.StatusOK {
			t.Fatalf("another instance: %d, want 200", s)
		}
		if s := health(t, instance(lifetime/2), session); s != http.StatusUnauthorized {
			t.Fatalf("an instance whose sessions last half as long: %d, want 401", s)
		}
	})

	t.Run("ends with its token", func(t *testing.T) {
		tok, session := login(t)
		other := instance(lifetime)
		if s := health(t, other, session); s != http.StatusOK {
			t.Fatalf("before the revocation: %d, want 200", s)
		}
		if s, _, body := do(t, p.srv, "DELETE", "/v1/tokens/"+tok.ID, admin, nil); s != http.StatusOK {
			t.Fatalf("revoke: %d %s", s, body)
		}
		if s := health(t, p, session); s != http.StatusUnauthorized {
			t.Fatalf("on the instance that revoked the token: %d, want 401 at once", s)
		}
		clock.advance(time.Second) // the other instance reads the tokens again
		if s := health(t, other, session); s != http.StatusUnauthorized {
			t.Fatalf("on another instance after a token refresh: %d, want 401", s)
		}
	})
}
