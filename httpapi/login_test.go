package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/testutil"
)

// send sends one request on srv's validating client without following
// redirects, with header name-value pairs, and returns the reply.
func send(t *testing.T, p *tokenInstance, method, path, form string, header ...string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != "" {
		body = strings.NewReader(form)
	}
	req, err := http.NewRequest(method, p.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := *p.srv.Client()
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
// monitor token into an HttpOnly, SameSite=Strict cookie that opens the
// monitoring GETs and nothing else; cross-origin logins, tokens in the URL
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
		{"admin token", "/id/login", "token=" + url.QueryEscape(admin), nil, http.StatusForbidden},
		{"token with ID scopes", "/id/login", "token=" + url.QueryEscape(both), nil, http.StatusForbidden},
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
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || c.Value != monitor {
		t.Fatalf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/, not Secure over plain HTTP", c)
	}
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

	t.Run("opens the monitoring GETs", func(t *testing.T) {
		for _, path := range []string{"/id/health", "/metrics", "/id/dashboard"} {
			resp, body := send(t, p, "GET", path, "", cookie(monitor)...)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s with the cookie: %d %.200s", path, resp.StatusCode, body)
			}
			if path == "/id/dashboard" && !strings.Contains(body, `<form id="logout" method="post" action="logout">`) {
				t.Errorf("the dashboard shows no logout button")
			}
		}
	})

	t.Run("never the ID or admin routes", func(t *testing.T) {
		// A forged cookie holding an admin token opens nothing either.
		for _, v := range []string{monitor, admin, both} {
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
		resp, _ := send(t, p, "POST", "/id/logout", "x=1", cookie(monitor)...)
		if c := loginCookie(resp); resp.StatusCode != http.StatusSeeOther || c == nil || c.MaxAge >= 0 || c.Value != "" {
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
			resp, _ := send(t, p, "GET", "/id/health", "", cookie(monitor)...)
			return resp.StatusCode == http.StatusUnauthorized
		})
	})
}

// TestLogin_Unprotected: without --protect-monitoring there is no login.
func TestLogin_Unprotected(t *testing.T) {
	p := newTokenInstance(t, stores(t)["sqlite"](t), httpapi.AuthConfig{}, httpapi.Limits{})
	if resp, _ := send(t, p, "GET", "/id/login", ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /id/login: %d, want 404", resp.StatusCode)
	}
}

// autoLogin wraps the API so that the login form fills in token and
// submits itself, as a person would: the test's only change to the pages.
type autoLogin struct {
	api   http.Handler
	token string
}

func (a autoLogin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != "/id/login" {
		a.api.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	a.api.ServeHTTP(rec, r)
	script := `<script>document.getElementById("token").value = ` + strconv.Quote(a.token) + `; document.forms[0].submit();</script>`
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
// /id/health read with the cookie alone; a form on another origin posting
// the same token is refused.
func TestLogin_Browser(t *testing.T) {
	bin := findChromium(t)
	store := stores(t)["sqlite"](t)
	if _, err := store.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 100}); err != nil {
		t.Fatal(err)
	}
	_, monitor := newToken(t, store, "browser", "monitor")
	a := allocator.New(allocator.Config{Store: store, Instance: "login", Logger: quiet()})
	t.Cleanup(func() { a.Close(context.Background()) })
	api := httpapi.NewServer(httpapi.Config{Allocator: a, Instance: "login", Logger: quiet(),
		Auth: httpapi.AuthConfig{Tokens: store, ProtectMonitoring: true}, Admin: store})
	srv := httptest.NewServer(autoLogin{api: api, token: monitor})
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
