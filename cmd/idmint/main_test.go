package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/migrations"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testlog"
	"github.com/idmint/idmint/testkit/testutil"
)

// TestMain runs the tests with serve's grpc-go listener off
// (IDMINT_GRPC_LISTEN=off, inherited by the idmint processes the tests
// start), so that instances on one host do not contend for its default
// port; the tests of the listener set --grpc-listen.
func TestMain(m *testing.M) {
	os.Setenv("IDMINT_GRPC_LISTEN", "off")
	os.Exit(pgtest.Main(m))
}

// idmint runs one command in-process and returns its output.
func idmint(tb testing.TB, args ...string) string {
	tb.Helper()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), args, &out, &errOut); err != nil {
		tb.Fatalf("idmint %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// startServe runs "idmint serve" in-process on a free loopback port and
// returns its base URL; the server is stopped (as by SIGTERM) on cleanup.
func startServe(tb testing.TB, args ...string) (string, func()) {
	tb.Helper()
	addr := testutil.FreeAddr(tb)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &testlog.Buffer{}
	go func() {
		done <- run(ctx, append([]string{"serve", "--listen", addr, "--log-format", "json"}, args...), io.Discard, logs)
	}()
	base := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/id/health")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("serve did not come up: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					tb.Errorf("serve: %v\n%s", err, logs.String())
				}
			case <-time.After(time.Minute):
				tb.Errorf("serve did not stop within a minute of its context's end\n%s", logs.String())
			}
		})
	}
	tb.Cleanup(stop)
	return base, stop
}

// TestEndToEnd drives the real binary's commands against real PostgreSQL
// and real HTTP: migrate, create a tag, serve, get IDs, restart, get larger
// IDs.
func TestEndToEnd(t *testing.T) {
	url := pgtest.Shared(t).NewDatabase(t)
	t.Setenv("IDMINT_DATABASE_URL", url)

	files, err := migrations.Files(migrations.PostgreSQL)
	if err != nil {
		t.Fatal(err)
	}
	sqlFiles, err := fs.Glob(files, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if out := idmint(t, "migrate", "--log-format", "json"); !strings.Contains(out, fmt.Sprintf("schema version %d", len(sqlFiles))) {
		t.Fatalf("migrate: %s", out)
	}
	idmint(t, "tag", "create", "order", "--step", "50", "--description", "orders")
	idmint(t, "tag", "create", "user", "--start", "1000000")
	if out := idmint(t, "tag", "set-step", "order", "20", "--max-step", "40"); !strings.Contains(out, "order    0       20    40") {
		t.Fatalf("set-step: %q", out)
	}
	list := idmint(t, "tag", "list")
	if !strings.Contains(list, "order") || !strings.Contains(list, "999999") {
		t.Fatalf("list: %s", list)
	}

	base, stop := startServe(t)
	var one struct {
		Tag string `json:"biz_tag"`
		ID  string `json:"id"`
	}
	if status := testutil.GetJSON(t, base+"/id?biz_tag=order", &one); status != 200 || one.ID != "1" {
		t.Fatalf("/id: %d %+v", status, one)
	}
	var many struct{ IDs []string }
	if status := testutil.GetJSON(t, base+"/ids?biz_tag=user&count=5", &many); status != 200 || len(many.IDs) != 5 || many.IDs[0] != "1000000" {
		t.Fatalf("/ids: %d %+v", status, many)
	}
	var e struct{ Error struct{ Code string } }
	if status := testutil.GetJSON(t, base+"/id?biz_tag=missing", &e); status != 404 || e.Error.Code != "unknown_tag" {
		t.Fatalf("unknown: %d %+v", status, e)
	}
	var h struct {
		Status string
		Tags   []struct {
			Tag    string `json:"biz_tag"`
			Issued int64  `json:"ids_issued"`
		}
	}
	if status := testutil.GetJSON(t, base+"/id/health", &h); status != 200 || h.Status != "ok" || len(h.Tags) != 2 {
		t.Fatalf("health: %d %+v", status, h)
	}
	stop()

	// A restarted instance hands out IDs above every ID handed out before.
	base, _ = startServe(t)
	if status := testutil.GetJSON(t, base+"/id?biz_tag=order", &one); status != 200 {
		t.Fatalf("after restart: %d %+v", status, one)
	}
	var id int64
	fmt.Sscan(one.ID, &id)
	if id <= 1 {
		t.Fatalf("after restart: id %d, want > 1", id)
	}
}

// TestServe_SingleMachine is the first run of a newcomer: no database URL,
// so serve opens a SQLite file in the data directory with a demo tag; after
// a restart the next ID is above every ID handed out before.
func TestServe_SingleMachine(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("IDMINT_DATABASE_URL", "")
	t.Setenv("IDMINT_DATA_DIR", dir)

	base, stop := startServe(t)
	var one struct{ ID string }
	if status := testutil.GetJSON(t, base+"/id?biz_tag=demo", &one); status != 200 || one.ID != "1" {
		t.Fatalf("/id?biz_tag=demo: %d %+v", status, one)
	}
	var e struct{ Error struct{ Code string } }
	if status := testutil.GetJSON(t, base+"/id?biz_tag=order", &e); status != 404 || e.Error.Code != "unknown_tag" {
		t.Fatalf("a request created a tag: %d %+v", status, e)
	}
	var many struct{ IDs []string }
	testutil.GetJSON(t, base+"/ids?biz_tag=demo&count=5", &many)
	stop()
	if _, err := os.Stat(filepath.Join(dir, "idmint.db")); err != nil {
		t.Fatal(err)
	}

	// The same file, from the tag command and a second start with --tag.
	if out := idmint(t, "tag", "list"); !strings.Contains(out, "demo") {
		t.Fatalf("tag list: %s", out)
	}
	base, _ = startServe(t, "--tag", "order,user")
	status := testutil.GetJSON(t, base+"/id?biz_tag=demo", &one)
	if len(many.IDs) != 5 {
		t.Fatalf("/ids?count=5 gave %v", many.IDs)
	}
	next, err1 := strconv.ParseInt(one.ID, 10, 64)
	last, err2 := strconv.ParseInt(many.IDs[len(many.IDs)-1], 10, 64)
	if status != 200 || err1 != nil || err2 != nil || next <= last {
		t.Fatalf("after restart: %d %+v, want above %d", status, one, last)
	}
	for _, tag := range []string{"order", "user"} {
		if status := testutil.GetJSON(t, base+"/id?biz_tag="+tag, &one); status != 200 || one.ID != "1" {
			t.Fatalf("--tag %s: %d %+v", tag, status, one)
		}
	}
}

func TestParseDatabaseURL(t *testing.T) {
	tests := []struct {
		name, url string
		dialect   migrations.Dialect
		path      string
	}{
		{"none: the default file", "", migrations.SQLite, ""},
		{"postgres", "postgres://u:p@h:5432/db", migrations.PostgreSQL, ""},
		{"postgresql", "postgresql://h/db?sslmode=disable", migrations.PostgreSQL, ""},
		{"sqlite absolute", "sqlite:///var/lib/idmint/ids.db", migrations.SQLite, "/var/lib/idmint/ids.db"},
		{"sqlite relative", "sqlite://ids.db", migrations.SQLite, "ids.db"},
		{"file absolute", "file:///var/lib/ids.db", migrations.SQLite, "/var/lib/ids.db"},
		{"file single slash", "file:/var/lib/ids.db", migrations.SQLite, "/var/lib/ids.db"},
		{"file relative", "file:ids.db", migrations.SQLite, "ids.db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, path, err := parseDatabaseURL(tt.url)
			if err != nil || d != tt.dialect || path != tt.path {
				t.Fatalf("got %q %q %v; want %q %q", d, path, err, tt.dialect, tt.path)
			}
		})
	}
	for _, bad := range []string{"mysql://u:secret@h/db", "sqlite://", "ids.db"} {
		_, _, err := parseDatabaseURL(bad)
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("parseDatabaseURL(%q) = %v; want an error without the password", bad, err)
		}
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		listen string
		step   int64
		pos    []string
	}{
		{"defaults", nil, nil, ":8080", 1000, nil},
		{"environment", nil, map[string]string{"IDMINT_LISTEN": ":9090", "IDMINT_STEP": "7"}, ":9090", 7, nil},
		{"flag beats environment", []string{"--listen", ":1"}, map[string]string{"IDMINT_LISTEN": ":9090"}, ":1", 1000, nil},
		{"positional anywhere", []string{"a", "--step", "5", "b"}, nil, ":8080", 5, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			listen := fs.String("listen", ":8080", "")
			step := fs.Int64("step", 1000, "")
			pos, err := parseFlags(fs, tt.args)
			if err != nil || *listen != tt.listen || *step != tt.step || fmt.Sprint(pos) != fmt.Sprint(tt.pos) {
				t.Fatalf("got %q %d %v %v", *listen, *step, pos, err)
			}
		})
	}
	t.Run("from a file", func(t *testing.T) {
		secret := filepath.Join(t.TempDir(), "listen")
		if err := os.WriteFile(secret, []byte(":7070\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("IDMINT_LISTEN_FILE", secret)
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		listen := fs.String("listen", ":8080", "")
		fs.Int64("step", 1, "")
		if _, err := parseFlags(fs, nil); err != nil || *listen != ":7070" {
			t.Fatalf("listen %q, err %v", *listen, err)
		}
		// Both ways at once is a mistake, not a silent choice.
		t.Setenv("IDMINT_LISTEN", ":9090")
		if _, err := parseFlags(flag.NewFlagSet("x", flag.ContinueOnError), nil); err != nil {
			t.Fatalf("a flag set without --listen: %v", err)
		}
		fs = flag.NewFlagSet("x", flag.ContinueOnError)
		fs.String("listen", ":8080", "")
		if _, err := parseFlags(fs, nil); err == nil || !strings.Contains(err.Error(), "IDMINT_LISTEN_FILE") {
			t.Fatalf("both set: err = %v", err)
		}
		// A bad value from a file is refused without echoing it.
		os.Unsetenv("IDMINT_LISTEN")
		bad := filepath.Join(t.TempDir(), "step")
		if err := os.WriteFile(bad, []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("IDMINT_STEP_FILE", bad)
		fs = flag.NewFlagSet("x", flag.ContinueOnError)
		fs.Int64("step", 1, "")
		if _, err := parseFlags(fs, nil); err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "IDMINT_STEP_FILE") {
			t.Fatalf("bad file value: err = %v", err)
		}
		t.Setenv("IDMINT_STEP_FILE", filepath.Join(t.TempDir(), "missing"))
		if _, err := parseFlags(fs, nil); err == nil {
			t.Fatal("a missing file was accepted")
		}
	})
	t.Run("bad environment value", func(t *testing.T) {
		t.Setenv("IDMINT_STEP", "many")
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.Int64("step", 1, "")
		if _, err := parseFlags(fs, nil); err == nil || !strings.Contains(err.Error(), "IDMINT_STEP") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestServe_FlagBounds: a segment log pruned after seconds would lose the
// rows lost replies are looked up by, and a count above allocator.MaxN is
// refused by the allocator; serve refuses such flags before it opens
// anything.
func TestServe_FlagBounds(t *testing.T) {
	for _, bad := range [][]string{
		{"--prune-after", "1ns"}, {"--prune-after", "59m"}, {"--prune-after", "-1h"},
		{"--max-count", "0"}, {"--max-count", "1000001"},
		{"--range-grants-per-second", "-1"}, {"--range-grants-per-second", "NaN"},
		{"--floor-lead-per-second", "0"}, {"--floor-lead-per-second", "-1"}, {"--floor-lead-per-second", "+Inf"},
		{"--token-max-stale", "0s"}, {"--token-max-stale", "500ms"}, {"--token-max-stale", "2h"},
		{"--login-attempts-per-minute", "-1"}, {"--login-attempts-per-minute", "NaN"},
		{"--login-session", "30s"}, {"--login-session", "721h"},
	} {
		var stderr bytes.Buffer
		// Bounded: an accepted value would serve until the context ends.
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		err := run(ctx, append([]string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, bad...), io.Discard, &stderr)
		if err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Fatalf("%v: err = %v, want a refusal", bad, err)
		}
		cancel()
	}
}

// TestServe_ReplicasRequired runs serve on a single PostgreSQL server that
// demands 2 standbys: the setting reaches the store, /id/health says why
// nothing new can be served, and a tag never loaded answers 503 rather than
// an ID no standby has. Bad values are refused at start.
func TestServe_ReplicasRequired(t *testing.T) {
	for _, args := range [][]string{{"--replicas-required", "many"}, {"--replica-ack", "apply"}} {
		err := run(context.Background(), append([]string{"serve"}, args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("serve %v: %v; want an error naming the flag", args, err)
		}
	}

	url := pgtest.Shared(t).NewDatabase(t)
	t.Setenv("IDMINT_DATABASE_URL", url)
	idmint(t, "migrate")
	idmint(t, "tag", "create", "order")
	t.Setenv("IDMINT_REPLICAS_REQUIRED", "2")
	base, _ := startServe(t)

	var e struct{ Error struct{ Code string } }
	if status := testutil.GetJSON(t, base+"/id?biz_tag=order", &e); status != http.StatusServiceUnavailable || e.Error.Code != "unavailable" {
		t.Fatalf("/id with 2 standbys required and none connected: %d %+v; want 503 unavailable", status, e)
	}
	var h struct {
		Status      string
		Reasons     []string
		Replication struct {
			Required  string `json:"replicas_required"`
			Connected int    `json:"replicas_connected"`
		}
	}
	testutil.GetJSON(t, base+"/id/health", &h)
	if h.Status != "degraded" || h.Replication.Required != "2" || h.Replication.Connected != 0 ||
		!strings.Contains(strings.Join(h.Reasons, ";"), "replicas_required 2 but 0 connected") {
		t.Fatalf("/id/health: %+v", h)
	}
}

// TestParseFlags_TokenVariables: --token is a different token to the admin
// commands, the drill and the health check, each read from a variable of
// its own; the IDMINT_TOKEN all three shared before still works, and the
// command's own variable wins over it.
func TestParseFlags_TokenVariables(t *testing.T) {
	for _, tc := range []struct {
		command []string
		env     string
	}{
		{[]string{"tag", "list"}, "IDMINT_ADMIN_TOKEN"},
		{[]string{"token", "list"}, "IDMINT_ADMIN_TOKEN"},
		{[]string{"drill"}, "IDMINT_DRILL_TOKEN"},
		{[]string{"healthcheck"}, "IDMINT_HEALTHCHECK_TOKEN"},
	} {
		t.Run(strings.Join(tc.command, " "), func(t *testing.T) {
			c := lookupCommand(strings.Join(tc.command, " "))
			help, _, err := runErr(append(tc.command, "--help")...)
			if err != nil || !strings.Contains(help, "--token ["+tc.env+" (or IDMINT_TOKEN, deprecated)]") {
				t.Fatalf("--help does not name %s for --token: %v\n%s", tc.env, err, help)
			}
			for _, env := range []map[string]string{
				{tc.env: "own"},
				{"IDMINT_TOKEN": "own"},
				{tc.env: "own", "IDMINT_TOKEN": "old"},
			} {
				for k, v := range env {
					t.Setenv(k, v)
				}
				fs, _ := c.flagSet()
				if _, err := parseFlags(fs, nil); err != nil {
					t.Fatal(err)
				}
				if got := fs.Lookup("token").Value.String(); got != "own" {
					t.Errorf("with %v --token is %q, want %q", env, got, "own")
				}
				for k := range env {
					os.Unsetenv(k)
				}
			}
		})
	}
}
