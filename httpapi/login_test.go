package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// send sends one request on srv's validating client without following
// redirects, with header name-value pairs, and returns the reply.
func send(t *testing.T, p *tokenInstance, method, path, form string, header ...string) (*http.Response, string) {
	t.Helper()
	return sendFrom(t, p.srv.Client(), p.srv.URL, method, path, form, header...)
}

// sendFrom is send on client c to the server at base.
func sendFrom(t *testing.T, client *http.Client, base, method, path, form string, header ...string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != "" {
		body = strings.NewReader(form)
	}
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func loginCookie(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == httpapi.MonitorCookie {
			return c
		}
	}
	return nil
}

// TestLogin_Cookie: under --protect-monitoring a browser logs in with a
// monitor token into an HttpOnly, SameSite=Strict cookie scoped to the
// form's directory (/id) that opens the dashboard and /id/health and
// nothing else, /metrics included; cross-origin logins, tokens in the URL
// and tokens with more than the monitor scope are refused; a revoked
// token's cookie stops working; logout clears it.
func TestLogin_Cookie(t *testing.T) {
	store := stores(t)["sqlite"](t)
	if _, err := store.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 100}); err != nil {
		t.Fatal(err)
	}
	p := newTokenInstance(t, store, httpapi.AuthConfig{IDs: httpapi.AuthToken, ProtectMonitoring: true}, httpapi.Limits{})
	monTok, monitor := newToken(t, store, "browser", "monitor")
	_, admin := newToken(t, store, "ops", "admin")
	_, both := newToken(t, store, "wide", "monitor", "ids")
	_, ids := newToken(t, store, "shop", "ids")

	t.Run("dashboard sends a browser to the form", func(t *testing.T) {
		resp, _ := send(t, p, "GET", "/id/dashboard", "", "Accept", "text/html,application/xhtml+xml")
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "login" {
			t.Fatalf("GET /id/dashboard: %d Location %q, want 303 to login", resp.StatusCode, resp.Header.Get("Location"))
		}
		if resp, _ := send(t, p, "GET", "/id/dashboard", ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET /id/dashboard without Accept text/html: %d, want 401", resp.StatusCode)
		}
		resp, body := send(t, p, "GET", "/id/login", "")
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `name="token"`) || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Fatalf("GET /id/login: %d %q", resp.StatusCode, body)
		}
	})

	refused := []struct {
		name, path, form string
		header           []string
		status           int
	}{
		{"bad token", "/id/login", "token=idm_AAAAAAAAAAAAAAAA_" + strings.Repeat("A", 43), nil, http.StatusUnauthorized},
		{"token in the URL only", "/id/login?token=" + url.QueryEscape(monitor), "x=1", nil, http.StatusUnauthorized},
		{"admin token", "/id/login", "token=" + url.QueryEscape(admin), nil, http.StatusUnauthorized},
		{"monitor token with ID scopes", "/id/login", "token=" + url.QueryEscape(both), nil, http.StatusUnauthorized},
		{"ID token", "/id/login", "token=" + url.QueryEscape(ids), nil, http.StatusUnauthorized},
		{"cross-site", "/id/login", "token=" + url.QueryEscape(monitor), []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"other origin", "/id/login", "token=" + url.QueryEscape(monitor), []string{"Origin", "https://evil.example"}, http.StatusForbidden},
	}
	for _, tc := range refused {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			resp, body := send(t, p, "POST", tc.path, tc.form, tc.header...)
			if resp.StatusCode != tc.status || loginCookie(resp) != nil {
				t.Fatalf("%d, cookie %v; want %d and no cookie", resp.StatusCode, loginCookie(resp), tc.status)
			}
			for _, secret := range []string{monitor, admin, both} {
				if strings.Contains(body, secret) {
					t.Fatalf("the reply echoes a token: %s", body)
				}
			}
		})
	}

	resp, _ := send(t, p, "POST", "/id/login?next=https://evil.example", "token="+url.QueryEscape(monitor), "Origin", p.srv.URL, "Sec-Fetch-Site", "same-origin")
	c := loginCookie(resp)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "dashboard" || c == nil {
		t.Fatalf("login: %d Location %q cookie %v", resp.StatusCode, resp.Header.Get("Location"), c)
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "" || c.Secure || strings.Contains(c.Value, monitor[len(monitor)-43:]) {
		t.Fatalf("cookie %+v: want HttpOnly, SameSite=Strict, no Path (the form's directory), not Secure over plain HTTP, no secret", c)
	}
	session := c.Value
	if resp, _ := send(t, p, "POST", "/id/login", "token="+url.QueryEscape(monitor), "X-Forwarded-Proto", "https"); loginCookie(resp) == nil || !loginCookie(resp).Secure {
		t.Errorf("behind a TLS proxy the cookie is not Secure: %v", loginCookie(resp))
	}
	t.Run("Secure over TLS", func(t *testing.T) {
		tlsSrv := httptest.NewUnstartedServer(p.srv.Config.Handler)
		tlsSrv.StartTLS()
		defer tlsSrv.Close()
		c := tlsSrv.Client()
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := c.PostForm(tlsSrv.URL+"/id/login", url.Values{"token": {monitor}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if c := loginCookie(resp); c == nil || !c.Secure || !c.HttpOnly {
			t.Fatalf("login over TLS: %d, cookie %+v: want Secure and HttpOnly", resp.StatusCode, c)
		}
	})
	cookie := func(v string) []string { return []string{"Cookie", httpapi.MonitorCookie + "=" + v} }

	t.Run("opens the dashboard and its health", func(t *testing.T) {
		for _, path := range []string{"/id/health", "/id/dashboard"} {
			resp, body := send(t, p, "GET", path, "", cookie(session)...)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s with the cookie: %d %.200s", path, resp.StatusCode, body)
			}
			if path == "/id/dashboard" && !strings.Contains(body, `<form id="logout" method="post" action="logout">`) {
				t.Errorf("the dashboard shows no logout button")
			}
		}
		// /metrics is for bearer tokens: the cookie's path does not reach
		// it, and a cookie sent there anyway opens nothing.
		if resp, body := send(t, p, "GET", "/metrics", "", cookie(session)...); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET /metrics with the cookie: %d %.200s, want 401", resp.StatusCode, body)
		}
	})

	t.Run("never the ID or admin routes", func(t *testing.T) {
		// A forged cookie holding an admin token opens nothing either.
		for _, v := range []string{session, monitor, admin, both} {
			for _, r := range []struct{ method, path, form string }{
				{"GET", "/id?biz_tag=order", ""},
				{"GET", "/ids?biz_tag=order&count=2", ""},
				{"GET", "/v1/tags", ""},
				{"POST", "/v1/segments", ""},
				{"POST", "/id/health", ""},
			} {
				resp, body := send(t, p, r.method, r.path, r.form, cookie(v)...)
				if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusMethodNotAllowed {
					t.Errorf("%s %s with a cookie: %d %.200s, want 401", r.method, r.path, resp.StatusCode, body)
				}
			}
		}
	})

	t.Run("logout", func(t *testing.T) {
		resp, _ := send(t, p, "POST", "/id/logout", "x=1", cookie(session)...)
		if c := loginCookie(resp); resp.StatusCode != http.StatusSeeOther || c == nil || c.MaxAge >= 0 || c.Value != "" || c.Path != "" {
			t.Fatalf("logout: %d cookie %+v", resp.StatusCode, c)
		}
		if resp, _ := send(t, p, "POST", "/id/logout", "x=1", "Sec-Fetch-Site", "cross-site"); resp.StatusCode != http.StatusForbidden {
			t.Errorf("cross-site logout: %d, want 403", resp.StatusCode)
		}
	})

	t.Run("revoked", func(t *testing.T) {
		if _, err := store.RevokeToken(context.Background(), monTok.ID); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 10*time.Second, "the revoked token's cookie refused", func() bool {
			resp, _ := send(t, p, "GET", "/id/health", "", cookie(session)...)
			return resp.StatusCode == http.StatusUnauthorized
		})
	})
}

// stepClock is a clock that stands still but for advance; it starts at
// the real time, as request deadlines are taken from it.
type stepClock struct{ ns atomic.Int64 }

func newStepClock() *stepClock {
	c := &stepClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *stepClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *stepClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// replyHeader is h without what differs between any two replies (Date).
func replyHeader(h http.Header) http.Header {
	h = h.Clone()
	h.Del("Date")
	return h
}

// TestLogin_SameRefusal: the login form answers every token it does not
// take with the same status, headers and bytes: malformed, made up, a real
// ID with a wrong secret, a token with other scopes than monitor alone, a
// revoked one. So it tells nobody which tokens exist, or which scopes they
// have. While the tokens cannot be checked, every token gets the same 503,
// a token this instance knows to be revoked too.
func TestLogin_SameRefusal(t *testing.T) {
	mk := func(name string, scopes ...string) (token.Token, string) {
		tok, bearer, err := token.New(name, scopes)
		if err != nil {
			t.Fatal(err)
		}
		return tok, bearer
	}
	mon, monitor := mk("browser", "monitor")
	adm, admin := mk("ops", "admin")
	wide, wideBearer := mk("wide", "monitor", "ids")
	shop, shopBearer := mk("shop", "ids:order")
	gone, goneBearer := mk("gone", "monitor")
	clock := newStepClock()
	at := clock.now()
	gone.RevokedAt = &at
	store := &outageTokens{}
	store.set(false, mon, adm, wide, shop, gone)
	const refresh, maxStale = time.Second, 10 * time.Second
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: orderAllocator(t, memstore.New()),
		Logger: testlog.Discard(), Now: clock.now,
		Auth: httpapi.AuthConfig{Tokens: store, ProtectMonitoring: true, Refresh: refresh, MaxStale: maxStale}})))
	t.Cleanup(srv.Close)
	p := &tokenInstance{srv: srv}
	login := func(tok string) (*http.Response, string) {
		t.Helper()
		return send(t, p, "POST", "/id/login", "token="+url.QueryEscape(tok))
	}
	madeUp := "idm_aaaaaaaaaaaaaaaa_" + strings.Repeat("A", 43)
	tokens := []struct{ name, token string }{
		{"malformed", "hello"},
		{"empty", ""},
		{"a real ID with a wrong secret", monitor[:len(monitor)-43] + strings.Repeat("A", 43)},
		{"admin", admin},
		{"monitor and ids", wideBearer},
		{"ids:order", shopBearer},
		{"revoked", goneBearer},
	}
	same := func(step string, want int, wantRetry string, more ...struct{ name, token string }) {
		t.Helper()
		ref, refBody := login(madeUp)
		if ref.StatusCode != want || ref.Header.Get("Retry-After") != wantRetry || loginCookie(ref) != nil {
			t.Fatalf("%s: a made-up token: %d Retry-After %q cookie %v, want %d Retry-After %q and no cookie",
				step, ref.StatusCode, ref.Header.Get("Retry-After"), loginCookie(ref), want, wantRetry)
		}
		for _, tc := range append(tokens, more...) {
			resp, body := login(tc.token)
			if resp.StatusCode != ref.StatusCode || body != refBody || !reflect.DeepEqual(replyHeader(resp.Header), replyHeader(ref.Header)) {
				t.Errorf("%s: %s: %d %v\n%s\nwant what a made-up token gets: %d %v\n%s", step, tc.name,
					resp.StatusCode, resp.Header, body, ref.StatusCode, ref.Header, refBody)
			}
		}
	}
	same("store up", http.StatusUnauthorized, "")
	if resp, _ := login(monitor); resp.StatusCode != http.StatusSeeOther || loginCookie(resp) == nil {
		t.Fatalf("the monitor token: %d, cookie %v; want 303 and the cookie", resp.StatusCode, loginCookie(resp))
	}

	// Past MaxStale without a read: nothing can be checked, and the
	// revoked token, known here for what it is, gets the 503 too.
	store.set(true)
	clock.advance(maxStale + refresh)
	same("token store out", http.StatusServiceUnavailable, "1", struct{ name, token string }{"monitor", monitor})
}

// TestLogin_RateLimit: the login attempts of one address are bounded (by
// idmint serve's default, 10 a minute): past the budget the form answers
// 429 with Retry-After and says why, without looking at the token, so a
// good one is refused too, and counts it in idmint_http_refused_total.
// Another address keeps its own budget; the first is served again once
// its budget has refilled.
func TestLogin_RateLimit(t *testing.T) {
	const perMinute = 10
	store := stores(t)["sqlite"](t)
	clock := newStepClock()
	p := newTokenInstanceWith(t, store, httpapi.AuthConfig{ProtectMonitoring: true},
		httpapi.Limits{LoginAttemptsPerMinute: perMinute}, func(c *httpapi.Config) { c.Now = clock.now })
	_, monitor := newToken(t, store, "browser", "monitor")
	madeUp := "token=idm_aaaaaaaaaaaaaaaa_" + strings.Repeat("A", 43)
	good := "token=" + url.QueryEscape(monitor)
	for i := range perMinute {
		if resp, body := send(t, p, "POST", "/id/login", madeUp); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d of the budget: %d %s, want 401", i+1, resp.StatusCode, body)
		}
	}
	for _, form := range []string{madeUp, good} {
		resp, body := send(t, p, "POST", "/id/login", form)
		if resp.StatusCode != http.StatusTooManyRequests || loginCookie(resp) != nil || !strings.Contains(body, "too many login attempts from your address") {
			t.Fatalf("an attempt past the budget: %d cookie %v\n%s\nwant 429, no cookie and why", resp.StatusCode, loginCookie(resp), body)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "6" { // one attempt every 6 s
			t.Fatalf("Retry-After %q, want 6", ra)
		}
	}
	other := clientFrom(t, "127.0.0.2")
	if resp, body := sendFrom(t, other, p.srv.URL, "POST", "/id/login", madeUp); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("another address: %d %s, want 401: its budget is its own", resp.StatusCode, body)
	}
	if resp, _ := sendFrom(t, other, p.srv.URL, "POST", "/id/login", good); resp.StatusCode != http.StatusSeeOther || loginCookie(resp) == nil {
		t.Fatalf("another address with the monitor token: %d, want 303 and the cookie", resp.StatusCode)
	}
	if n := refusedAs(t, p.srv.URL, monitor, wire.CodeRateLimited); n != 2 {
		t.Errorf("idmint_http_refused_total{code=rate_limited} = %d, want 2", n)
	}
	clock.advance(6 * time.Second)
	if resp, _ := send(t, p, "POST", "/id/login", good); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("6 s later: %d, want 303", resp.StatusCode)
	}
}

// TestLogin_Unprotected: without --protect-monitoring there is no login.
func TestLogin_Unprotected(t *testing.T) {
	p := newTokenInstance(t, stores(t)["sqlite"](t), httpapi.AuthConfig{}, httpapi.Limits{})
	if resp, _ := send(t, p, "GET", "/id/login", ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /id/login: %d, want 404", resp.StatusCode)
	}
}

// autoLogin wraps the API so that the login form fills in token and
// submits itself, as a person would, and the dashboard, once logged in,
// also fetches paths outside /id: the test's only changes to the pages.
// It notes which paths the browser sent the login cookie to.
type autoLogin struct {
	api   http.Handler
	token string

	mu         sync.Mutex // protects withCookie
	withCookie map[string]bool
}

func (a *autoLogin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, err := r.Cookie(httpapi.MonitorCookie)
	a.mu.Lock()
	a.withCookie[r.URL.Path] = a.withCookie[r.URL.Path] || err == nil
	a.mu.Unlock()
	var script string
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/id/login":
		script = `<script>document.getElementById("token").value = ` + strconv.Quote(a.token) + `; document.forms[0].submit();</script>`
	case r.Method == http.MethodGet && r.URL.Path == "/id/dashboard":
		script = `<script>fetch("../metrics"); fetch("../openapi.yaml");</script>`
	default:
		a.api.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	a.api.ServeHTTP(rec, r)
	for k, v := range rec.Header() {
		if k != "Content-Security-Policy" && k != "Content-Length" {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(rec.Code)
	io.WriteString(w, strings.Replace(rec.Body.String(), "</body>", script+"</body>", 1))
}

// TestLogin_Browser: headless Chromium opens the protected dashboard, is
// sent to the login form, logs in with a monitor token, and the page shows
// /id/health read with the cookie alone; the browser sends the cookie to
// the paths under /id and to no other (/metrics, /openapi.yaml); a form on
// another origin posting the same token is refused.
func TestLogin_Browser(t *testing.T) {
	bin := findChromium(t)
	store := stores(t)["sqlite"](t)
	if _, err := store.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 100}); err != nil {
		t.Fatal(err)
	}
	_, monitor := newToken(t, store, "browser", "monitor")
	a := allocator.New(allocator.Config{Store: store, Instance: "login", Logger: testlog.Discard()})
	t.Cleanup(func() { a.Close(context.Background()) })
	api := httpapi.NewServer(httpapi.Config{Allocator: a, Instance: "login", Logger: testlog.Discard(),
		Auth: httpapi.AuthConfig{Tokens: store, ProtectMonitoring: true}, Admin: store})
	login := &autoLogin{api: api, token: monitor, withCookie: map[string]bool{}}
	srv := httptest.NewServer(login)
	t.Cleanup(srv.Close)
	if resp, err := http.Get(srv.URL + "/id?biz_tag=order"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/id: %v %v", resp, err)
	}

	dom := string(runChromium(t, bin, srv.URL+"/id/dashboard", 3000, "--dump-dom"))
	if !strings.Contains(dom, `data-loaded="true"`) || !strings.Contains(dom, `data-tag="order"`) {
		t.Fatalf("after the login the page did not render /id/health:\n%s", dom)
	}
	if !strings.Contains(dom, `<form id="logout" method="post" action="logout">`) {
		t.Errorf("no logout button on the page")
	}
	login.mu.Lock()
	sent := maps.Clone(login.withCookie)
	login.mu.Unlock()
	for path, want := range map[string]bool{"/id/health": true, "/id/dashboard": true, "/metrics": false, "/openapi.yaml": false} {
		if got, asked := sent[path]; !asked || got != want {
			t.Errorf("the browser asked for %s: %v, with the login cookie: %v; want asked, with the cookie: %v (all: %v)", path, asked, got, want, sent)
		}
	}

	// Another origin (another port) with a form that posts the token.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<form method="post" action="%s/id/login"><input name="token" value="%s"></form><script>document.forms[0].submit()</script>`, srv.URL, monitor)
	}))
	t.Cleanup(evil.Close)
	dom = string(runChromium(t, bin, evil.URL, 2000, "--dump-dom"))
	if !strings.Contains(dom, "cross-origin request refused") {
		t.Fatalf("a cross-origin login was not refused:\n%s", dom)
	}
}
