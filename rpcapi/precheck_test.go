package rpcapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/snowflake"
)

// stillSnowflake is a Snowflake source for routes that are never asked
// for an ID here.
type stillSnowflake struct{}

func (stillSnowflake) Next(context.Context) (int64, error)         { return 1, nil }
func (stillSnowflake) NextN(context.Context, int) ([]int64, error) { return []int64{1}, nil }
func (stillSnowflake) Layout() snowflake.Layout                    { return snowflake.Layout{} }
func (stillSnowflake) Stats() snowflake.Stats                      { return snowflake.Stats{} }

// TestOperations_Access: the access control each procedure is checked
// against before its message is read is its route's: for every procedure
// (and the health service), under each setting, Precheck refuses a caller
// without a token, or with a malformed one, exactly when the route answers
// it 401.
func TestOperations_Access(t *testing.T) {
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10}); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := allocator.New(allocator.Config{Store: m, Logger: quiet, Instance: "test"})
	t.Cleanup(func() { a.Close(context.Background()) })
	checks := append([]operation{{"grpc.health.v1.Health/Check", http.MethodGet, "/id/health", httpapi.AccessMonitoring, always}}, operations...)
	for _, tc := range []struct {
		name string
		auth httpapi.AuthConfig
	}{
		{"open", httpapi.AuthConfig{Tokens: m}},
		{"token", httpapi.AuthConfig{Tokens: m, IDs: httpapi.AuthToken}},
		{"token, monitoring protected", httpapi.AuthConfig{Tokens: m, IDs: httpapi.AuthToken, ProtectMonitoring: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httpapi.NewServer(httpapi.Config{Allocator: a, Logger: quiet, Admin: m, TokenAdmin: m, Snowflake: stillSnowflake{},
				Auth: tc.auth, RPC: New()})
			for _, op := range checks {
				path := strings.ReplaceAll(strings.ReplaceAll(op.path, "{biz_tag}", "order"), "{name}", "n")
				path = strings.ReplaceAll(path, "{id}", "idm_x")
				if !srv.Router().Match(chi.NewRouteContext(), op.method, path) {
					continue // not served here: neither is the procedure
				}
				for _, authz := range []string{"", "Bearer not-a-token"} {
					req := httptest.NewRequest(op.method, path, nil)
					if authz != "" {
						req.Header.Set("Authorization", authz)
					}
					w := httptest.NewRecorder()
					srv.ServeHTTP(w, req)
					refused := srv.Precheck(req, op.access) != nil
					if route := w.Code == http.StatusUnauthorized; route != refused {
						t.Errorf("%s (%s %s), Authorization %q: the route answers %d, Precheck refuses: %v",
							op.procedure, op.method, op.path, authz, w.Code, refused)
					}
				}
			}
		})
	}
}
