package main

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idmint/idmint/token"
)

// TestCLI_TokensOverServer: the token commands with --server make, list and
// revoke tokens through a running instance's admin API with an admin
// token: the new token is printed once and works at once, the list never
// shows a secret, a revocation is refused at once, an ID token is refused,
// and bad settings are refused before anything is sent.
func TestCLI_TokensOverServer(t *testing.T) {
	t.Setenv("IDMINT_DATABASE_URL", "")
	t.Setenv("IDMINT_DATA_DIR", t.TempDir())
	admin := strings.TrimSpace(idmint(t, "token", "create", "--name", "ops", "--scope", "admin"))
	idmint(t, "tag", "create", "order", "--step", "10")
	base, _ := startServe(t, "--auth", "token")
	remote := func(args ...string) []string { return append(args, "--server", base, "--token", admin) }

	out, stderr, err := runErr(remote("token", "create", "--name", "app", "--scope", "ids:order", "--rate", "500")...)
	bearer := strings.TrimSpace(out)
	id, secret, ok := token.Parse(bearer)
	if err != nil || !ok || !strings.Contains(stderr, "shown once") || !strings.Contains(stderr, "admin API of") || !strings.Contains(stderr, id) {
		t.Fatalf("token create --server: %v\n%s\n%s", err, out, stderr)
	}
	get := func(bearer string) int { return getOrder(t, base, bearer) }
	if s := get(bearer); s != 200 {
		t.Fatalf("the token made over the API: %d, want 200 at once", s)
	}

	list := idmint(t, remote("token", "list")...)
	if !strings.Contains(list, id) || !strings.Contains(list, "ids:order") || !strings.Contains(list, "500/s") || strings.Contains(list, secret) {
		t.Fatalf("token list --server:\n%s", list)
	}
	if _, _, err := runErr("token", "list", "--server", base, "--token", bearer); err == nil || !strings.Contains(err.Error(), "scope") {
		t.Fatalf("token list with an ID token: %v", err)
	}
	if _, _, err := runErr(remote("token", "create", "--name", "x", "--scope", "root")...); !errors.Is(err, token.ErrInvalid) {
		t.Fatalf("a bad scope: %v", err)
	}
	if _, _, err := runErr(remote("token", "revoke", "aaaaaaaaaaaaaaaa")...); !errors.Is(err, token.ErrUnknown) {
		t.Fatalf("revoke unknown: %v, want ErrUnknown", err)
	}

	// The whole token given: only its ID is sent.
	out, stderr, err = runErr(remote("token", "revoke", bearer)...)
	if err != nil || !strings.Contains(out, "app") || !strings.Contains(stderr, "revoking its ID "+id) {
		t.Fatalf("token revoke --server: %v\n%s\n%s", err, out, stderr)
	}
	if s := get(bearer); s != 401 {
		t.Fatalf("the token revoked over the API: %d, want 401 at once", s)
	}
	if out := idmint(t, remote("token", "revoke", id)...); !strings.Contains(out, "app") {
		t.Fatalf("revoke again: %s", out)
	}
}

// getOrder is the status of GET /id?biz_tag=order on base with bearer.
func getOrder(tb testing.TB, base, bearer string) int {
	tb.Helper()
	req, err := http.NewRequest("GET", base+"/id?biz_tag=order", nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
