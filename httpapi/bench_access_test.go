package httpapi_test

import (
	"context"
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

// BenchmarkAccess_ID measures GET /id through the handler alone (no
// network) in the open mode, which must add nothing to the hot path, and in
// the token mode with and without a per-token limit: the cost of checking a
// token (a map lookup and a SHA-256) and of charging its limiter.
func BenchmarkAccess_ID(b *testing.B) {
	for _, bc := range []struct {
		name  string
		auth  httpapi.AuthMode
		limit float64
	}{{"open", httpapi.AuthOpen, 0}, {"token", httpapi.AuthToken, 0}, {"token+limit", httpapi.AuthToken, 1e12}} {
		b.Run(bc.name, func(b *testing.B) {
			m := memstore.New()
			if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 1_000_000}); err != nil {
				b.Fatal(err)
			}
			tok, bearer, _ := token.New("bench", []string{"ids:order"})
			if _, err := m.CreateToken(context.Background(), tok); err != nil {
				b.Fatal(err)
			}
			a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard()})
			defer a.Close(context.Background())
			h := httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(),
				Auth: httpapi.AuthConfig{Tokens: m, IDs: bc.auth}, Limits: httpapi.Limits{IDsPerSecondPerToken: bc.limit}})
			req := httptest.NewRequest(http.MethodGet, "/id?biz_tag=order", nil)
			req.Header.Set("Authorization", "Bearer "+bearer)
			benchGet(b, h, req)
		})
	}
}

// BenchmarkAccess_Login measures, through the handler alone, GET
// /id/health under protected monitoring with a monitor token as a bearer
// and with a login session in the cookie (a map lookup and an HMAC-SHA256
// instead of a SHA-256), and a refused POST /id/login charged to its
// address's budget.
func BenchmarkAccess_Login(b *testing.B) {
	m := memstore.New()
	tok, bearer, _ := token.New("bench", []string{"monitor"})
	if _, err := m.CreateToken(context.Background(), tok); err != nil {
		b.Fatal(err)
	}
	a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard()})
	defer a.Close(context.Background())
	h := httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(),
		Auth:   httpapi.AuthConfig{Tokens: m, ProtectMonitoring: true},
		Limits: httpapi.Limits{LoginAttemptsPerMinute: 1e12}})
	session := forgeSession(tok, time.Now().Add(time.Hour))
	for _, bc := range []struct {
		name, method, path, body string
		header                   []string
		want                     int
	}{
		{"health/bearer", "GET", "/id/health", "", []string{"Authorization", "Bearer " + bearer}, 200},
		{"health/session", "GET", "/id/health", "", []string{"Cookie", httpapi.MonitorCookie + "=" + session}, 200},
		{"login/refused", "POST", "/id/login", "token=idm_aaaaaaaaaaaaaaaa_" + strings.Repeat("A", 43),
			[]string{"Content-Type", "application/x-www-form-urlencoded"}, 401},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(bc.method, bc.path, strings.NewReader(bc.body))
				for i := 0; i+1 < len(bc.header); i += 2 {
					req.Header.Set(bc.header[i], bc.header[i+1])
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != bc.want {
					b.Fatalf("status %d, want %d: %s", rec.Code, bc.want, rec.Body)
				}
			}
		})
	}
}
