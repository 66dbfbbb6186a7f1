package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/token"
)

// FuzzAuth sends arbitrary Authorization headers and queries to the token
// mode: no panic, always a JSON reply, and an ID only for the one valid
// token within its scope.
func FuzzAuth(f *testing.F) {
	m := memstore.New()
	for _, tag := range []string{"order", "user"} {
		if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: tag, Step: 100}); err != nil {
			f.Fatal(err)
		}
	}
	tok, bearer, err := token.New("fuzz", []string{"ids:order"})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := m.CreateToken(context.Background(), tok); err != nil {
		f.Fatal(err)
	}
	a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard()})
	f.Cleanup(func() { a.Close(context.Background()) })
	h := httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), MaxCount: 10,
		Auth: httpapi.AuthConfig{Tokens: m, IDs: httpapi.AuthToken}, Admin: m,
		Limits: httpapi.Limits{IDsPerSecondPerToken: 1e9}})
	for _, seed := range []struct{ auth, query string }{
		{"Bearer " + bearer, "biz_tag=order"}, {"Bearer " + bearer, "biz_tag=user"}, {"bearer " + bearer, "biz_tag=order&count=3"},
		{"Basic " + bearer, "biz_tag=order"}, {"Bearer", ""}, {"Bearer " + bearer[:20], "biz_tag=order"}, {"", "biz_tag=order"},
		{"Bearer " + bearer, "biz_tag=%6Frder"}, {"Bearer " + bearer, "biz_tag=order&biz_tag=user"}, {"Bearer " + bearer, "biz_tag=user;x"},
	} {
		f.Add(seed.auth, seed.query)
	}
	f.Fuzz(func(t *testing.T, auth, query string) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL.Path, req.URL.RawQuery = "/ids", query
		if len(query) < 3 || query[0]%2 == 0 {
			req.URL.Path = "/id"
		}
		req.Header.Set("Authorization", auth)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("not JSON: %q", rec.Body)
		}
		if rec.Code == http.StatusOK {
			var got struct {
				Tag string `json:"biz_tag"`
			}
			json.Unmarshal(rec.Body.Bytes(), &got)
			_, cred, _ := strings.Cut(auth, " ")
			_, secret, ok := token.Parse(strings.TrimSpace(cred))
			if !ok || !tok.Matches(secret) || got.Tag != "order" {
				t.Fatalf("served %q to Authorization %q, query %q", got.Tag, auth, query)
			}
		}
		if rec.Code == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
			t.Fatal("401 without WWW-Authenticate")
		}
	})
}

// FuzzLoginCookie sends arbitrary Cookie headers to /id/health under
// protected monitoring: no panic, always a JSON reply, and a 200 only for
// a header holding the one live session of the monitor token.
func FuzzLoginCookie(f *testing.F) {
	m := memstore.New()
	mon, monitor, err := token.New("browser", []string{"monitor"})
	if err != nil {
		f.Fatal(err)
	}
	adm, admin, err := token.New("ops", []string{"admin"})
	if err != nil {
		f.Fatal(err)
	}
	for _, t := range []token.Token{mon, adm} {
		if _, err := m.CreateToken(context.Background(), t); err != nil {
			f.Fatal(err)
		}
	}
	a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard()})
	f.Cleanup(func() { a.Close(context.Background()) })
	now := time.Now()
	h := httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), Now: func() time.Time { return now },
		Auth: httpapi.AuthConfig{Tokens: m, ProtectMonitoring: true}})
	good := forgeSession(mon, now.Add(time.Hour))
	name := httpapi.MonitorCookie + "="
	for _, seed := range []string{
		name + good, name + good[:len(good)-1] + "A", name + "x; " + name + good, name + monitor, name + admin,
		name + forgeSession(adm, now.Add(time.Hour)), name + forgeSession(mon, now.Add(-time.Second)),
		name + forgeSession(mon, now.Add(100*365*24*time.Hour)), name + strings.Replace(good, ".", "..", 1),
		name + "v1." + mon.ID + ".+" + good[len("v1.")+len(mon.ID)+1:], "", name, strings.Repeat(name+"v1.;", 50),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, cookie string) {
		req := httptest.NewRequest(http.MethodGet, "/id/health", nil)
		req.Header.Set("Cookie", cookie)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("not JSON: %q", rec.Body)
		}
		in := rec.Code == http.StatusOK || rec.Code == http.StatusServiceUnavailable // health, serving or not
		if in && !strings.Contains(cookie, good) {
			t.Fatalf("Cookie %q let in: %d %s", cookie, rec.Code, rec.Body)
		}
		if !in && cookie == name+good {
			t.Fatalf("the live session refused: %d %s", rec.Code, rec.Body)
		}
	})
}
