package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testutil"
)

// runErr runs one command in-process and returns its output and error.
func runErr(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestCLI_Usage: stray arguments and unknown subcommands are usage errors
// (exit 2); TestCLI_Table checks every command's --help.
func TestCLI_Usage(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "extra"}, {"migrate", "now"}, {"healthcheck", "please"}, {"drill", "--target", "http://x", "more"},
		{"tag", "nope"}, {"token", "nope"}, {"token", "revoke"}, {"tag", "list", "extra"},
		{"standby"}, {"standby", "nope"}, {"standby", "forget"}, {"standby", "list", "extra"},
	} {
		if _, _, err := runErr(args...); !errors.Is(err, errUsage) || exitCode(err) != 2 {
			t.Errorf("idmint %s: %v, want a usage error", strings.Join(args, " "), err)
		}
	}
}

// TestCLI_Errors: clear messages for a SQLite file in a missing directory,
// an unreachable database (no advice to migrate, no credentials echoed),
// and a bump that would lower max_id (nothing changed, exit 1).
func TestCLI_Errors(t *testing.T) {
	t.Setenv("IDMINT_DATABASE_URL", "")
	t.Setenv("IDMINT_DATA_DIR", t.TempDir())

	if _, _, err := runErr("standby", "list"); err == nil || !strings.Contains(err.Error(), "only PostgreSQL") {
		t.Errorf("standby list on SQLite: %v; want it refused", err)
	}
	missing := "sqlite://" + filepath.Join(t.TempDir(), "no", "such", "dir", "idmint.db")
	if _, _, err := runErr("tag", "list", "--database-url", missing); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing directory: %v", err)
	}
	_, _, err := runErr("tag", "list", "--database-url", "postgres://someone:hunter2@127.0.0.1:1/db?connect_timeout=2")
	if err == nil || strings.Contains(err.Error(), "migrate") || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("unreachable database: %v", err)
	}

	idmint(t, "tag", "create", "order", "--step", "10")
	if out := idmint(t, "tag", "bump", "order", "--to", "5000"); !strings.Contains(out, "5000") {
		t.Fatalf("bump up: %s", out)
	}
	out, _, err := runErr("tag", "bump", "order", "--to", "100")
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "nothing changed") || !strings.Contains(out, "5000") {
		t.Fatalf("bump down: %v, %q", err, out)
	}
	if out := idmint(t, "tag", "describe", "order", "orders of the shop"); !strings.Contains(out, "orders of the shop") {
		t.Fatalf("describe: %s", out)
	}
}

// TestCLI_TokensAndAdminAPI: tokens made with the CLI guard a served
// instance (--auth token), the tag commands work over its admin API with an
// admin token, healthcheck finds serve through IDMINT_LISTEN, and a revoked
// token stops working.
func TestCLI_TokensAndAdminAPI(t *testing.T) {
	t.Setenv("IDMINT_DATABASE_URL", "")
	t.Setenv("IDMINT_DATA_DIR", t.TempDir())
	admin := strings.TrimSpace(idmint(t, "token", "create", "--name", "ops", "--scope", "admin"))
	ids := strings.TrimSpace(idmint(t, "token", "create", "--name", "app", "--scope", "ids:order"))
	if _, _, err := runErr("token", "create", "--name", "x", "--scope", "everything"); err == nil {
		t.Fatal("a bad scope was accepted")
	}
	idmint(t, "token", "create", "--name", "bulk", "--scope", "ids", "--rate", "50000")
	for _, bad := range []string{"-1", "NaN", "2e12"} {
		if _, _, err := runErr("token", "create", "--name", "x", "--scope", "ids", "--rate", bad); err == nil {
			t.Fatalf("rate %s was accepted", bad)
		}
	}
	list := idmint(t, "token", "list")
	if !strings.Contains(list, "ops") || !strings.Contains(list, "ids:order") || strings.Contains(list, admin[21:]) ||
		!strings.Contains(list, "50000/s") {
		t.Fatalf("token list: %s", list)
	}

	base, _ := startServe(t, "--auth", "token")
	t.Setenv("IDMINT_LISTEN", strings.TrimPrefix(base, "http://"))
	if out, stderr, err := runErr("healthcheck"); err != nil || out != "ok\n" {
		t.Fatalf("healthcheck with IDMINT_LISTEN: %v %s", err, stderr)
	}

	if out := idmint(t, "tag", "create", "order", "--step", "10", "--runway", "8s", "--server", base, "--token", admin); !strings.Contains(out, "order") || !strings.Contains(out, "8s") {
		t.Fatalf("tag create over the API: %s", out)
	}
	if out := idmint(t, "tag", "update", "order", "--runway", "1m0.5s", "--server", base, "--token", admin); !strings.Contains(out, "1m0.5s") {
		t.Fatalf("tag update --runway over the API: %s", out)
	}
	if _, _, err := runErr("tag", "list", "--server", base, "--token", ids); err == nil || !strings.Contains(err.Error(), "scope") {
		t.Fatalf("tag list with an ids token: %v", err)
	}
	get := func(bearer string) int { return getOrder(t, base, bearer) }
	testutil.Eventually(t, 10*time.Second, "the tag created over the API served", func() bool { return get(ids) == 200 })
	if s := get(admin); s != 403 {
		t.Fatalf("admin token on /id: %d, want 403", s)
	}
	_, _, err := runErr("tag", "bump", "order", "--to", "1", "--server", base, "--token", admin)
	if err == nil || !strings.Contains(err.Error(), "nothing changed") {
		t.Fatalf("bump down over the API: %v", err)
	}
	var id string
	for line := range strings.Lines(idmint(t, "token", "list")) {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "app" {
			id = f[0]
		}
	}
	if out := idmint(t, "token", "revoke", id); !strings.Contains(out, "app") {
		t.Fatalf("revoke: %s", out)
	}
	testutil.Eventually(t, 10*time.Second, "the revoked token refused", func() bool { return get(ids) == 401 })
}
