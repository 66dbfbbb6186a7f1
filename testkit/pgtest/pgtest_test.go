package pgtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func connect(tb testing.TB, url string) *pgx.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("connect %s: %v", url, err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestShared(t *testing.T) {
	s := Shared(t)
	t.Logf("kind %s, url %s", s.Kind(), s.URL())

	if again := Shared(t); again != s {
		t.Fatalf("Shared returned %p, then %p; want one server", s, again)
	}
	if want := os.Getenv(envMode); want != "" {
		kinds := map[string]string{"external": KindExternal, "docker": KindTestcontainers, "local": KindLocal}
		if s.Kind() != kinds[want] {
			t.Fatalf("Kind() = %q with %s=%s", s.Kind(), envMode, want)
		}
	}
	if s.Kind() != KindExternal && !strings.Contains(s.URL(), "@127.0.0.1:") {
		t.Fatalf("URL() = %q; want a server on 127.0.0.1", s.URL())
	}

	conn := connect(t, s.URL())
	var sum int
	var db string
	if err := conn.QueryRow(context.Background(), "SELECT $1::int + 1, current_database()", 41).Scan(&sum, &db); err != nil {
		t.Fatal(err)
	}
	if sum != 42 || db != "postgres" {
		t.Fatalf("round trip gave %d in %q; want 42 in postgres", sum, db)
	}
}

func TestServer_NewDatabase(t *testing.T) {
	s := Shared(t)
	ctx := context.Background()
	var names []string

	t.Run("isolated", func(t *testing.T) {
		urlA, urlB := s.NewDatabase(t), s.NewDatabase(t)
		if urlA == urlB {
			t.Fatalf("two databases with one URL %s", urlA)
		}
		a, b := connect(t, urlA), connect(t, urlB)
		for _, c := range []*pgx.Conn{a, b} {
			var name string
			if err := c.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		}
		if _, err := a.Exec(ctx, "CREATE TABLE only_in_a (x int); INSERT INTO only_in_a VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := a.QueryRow(ctx, "SELECT count(*) FROM only_in_a").Scan(&n); err != nil || n != 1 {
			t.Fatalf("count in a = %d, %v; want 1", n, err)
		}
		var found bool
		if err := b.QueryRow(ctx, "SELECT to_regclass('only_in_a') IS NOT NULL").Scan(&found); err != nil {
			t.Fatal(err)
		}
		if found {
			t.Fatal("table created in database a is visible in database b")
		}
		// a and b stay connected: the cleanup must drop the databases anyway.
	})

	if len(names) != 2 {
		t.Fatalf("subtest did not report its databases: %v", names)
	}
	valid := regexp.MustCompile(`^pgtest_[a-z0-9_]+_[0-9a-f]{12}$`)
	var left int
	admin := connect(t, s.URL())
	for _, name := range names {
		if !valid.MatchString(name) || len(name) > 63 {
			t.Errorf("database name %q: want %s, at most 63 bytes", name, valid)
		}
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		left += n
	}
	if left != 0 {
		t.Fatalf("%d of the databases %v still exist after their test", left, names)
	}
}

func TestServer_Restart(t *testing.T) {
	s := Owned(t)
	url := s.NewDatabase(t)
	ctx := context.Background()
	setup := connect(t, url)
	if _, err := setup.Exec(ctx, "CREATE TABLE kept (n bigint); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	want := int64(7) // each subtest adds one before restarting

	for _, tt := range []struct {
		name      string
		immediate bool
	}{
		{name: "fast", immediate: false},
		{name: "immediate", immediate: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := connect(t, url)
			var started time.Time
			if err := before.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&started); err != nil {
				t.Fatal(err)
			}
			if _, err := before.Exec(ctx, "UPDATE kept SET n = n + 1"); err != nil {
				t.Fatal(err)
			}

			want++
			adminURL := s.URL()
			begin := time.Now()
			s.Restart(t, tt.immediate)
			t.Logf("%s restart of the %s server took %v", tt.name, s.Kind(), time.Since(begin).Round(time.Millisecond))
			if s.URL() != adminURL {
				t.Fatalf("URL() = %s after the restart, was %s", s.URL(), adminURL)
			}

			if err := before.Ping(ctx); err == nil {
				t.Fatal("a connection from before the restart still works; was the server restarted?")
			}
			after := connect(t, url)
			var restarted time.Time
			var n int64
			if err := after.QueryRow(ctx, "SELECT pg_postmaster_start_time(), (SELECT n FROM kept)").Scan(&restarted, &n); err != nil {
				t.Fatal(err)
			}
			if !restarted.After(started) {
				t.Errorf("postmaster start time %v, was %v; want later", restarted, started)
			}
			if n != want {
				t.Errorf("after the restart n = %d; want %d (committed data kept)", n, want)
			}
		})
	}
}

func TestServer_StopStart(t *testing.T) {
	s := Owned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	s.Stop(t, false)
	s.Stop(t, false) // stopping twice is harmless
	if err := ping(ctx, s.URL()); err == nil {
		t.Fatal("the server answers after Stop")
	}
	s.Start(t)
	s.Start(t) // starting twice is harmless
	if err := ping(ctx, s.URL()); err != nil {
		t.Fatalf("the server does not answer after Start: %v", err)
	}
}

func TestExternal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Any server will do as an "external" one; the shared one is at hand.
	s, err := startExternal(ctx, Shared(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind() != KindExternal {
		t.Fatalf("Kind() = %q; want %q", s.Kind(), KindExternal)
	}
	conn := connect(t, s.NewDatabase(t))
	if err := conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	var skipped bool
	t.Run("restart skips when allowed", func(t *testing.T) {
		t.Setenv(envAllowSkip, "other,"+topName(t))
		// This skip checks Skip itself; it is no scenario of this run, and
		// the report would list TestExternal as skipped as well as ran.
		t.Setenv(envReport, "")
		defer func() { skipped = t.Skipped() }()
		s.Restart(t, true)
	})
	if !skipped {
		t.Fatal("Restart of an external server did not skip the test")
	}

	if _, err := startExternal(ctx, "host=127.0.0.1 user=postgres"); err == nil {
		t.Fatal("startExternal accepted a key=value DSN; want a URL")
	}
}

func TestNew(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second server")
	}
	shared := Shared(t)
	s := New(t)
	if s == shared || s.URL() == shared.URL() {
		t.Fatalf("New gave the shared server %s", s.URL())
	}
	if want := shared.Kind(); s.Kind() != want && (want != KindExternal || s.Kind() == KindExternal) {
		t.Fatalf("New gave a %s server, Shared a %s one", s.Kind(), want)
	}
	s.Restart(t, true)
	if err := ping(context.Background(), s.NewDatabase(t)); err != nil {
		t.Fatal(err)
	}
}

func TestAllowSkip(t *testing.T) {
	for _, tt := range []struct {
		name, env string
		want      bool
	}{
		{name: "unset", env: "", want: false},
		{name: "other tests", env: "TestA,TestB", want: false},
		{name: "named", env: "TestA, TestCrash", want: true},
		{name: "all", env: "all", want: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(envAllowSkip, tt.env)
			if got := allowSkip("TestCrash"); got != tt.want {
				t.Fatalf("%s=%q: allowSkip(TestCrash) = %v, want %v", envAllowSkip, tt.env, got, tt.want)
			}
		})
	}
}

func TestDatabaseName(t *testing.T) {
	for _, tt := range []struct {
		name, test string
		prefix     string
	}{
		{name: "simple", test: "TestFoo", prefix: "pgtest_testfoo_"},
		{name: "subtest", test: "TestFoo/bar baz", prefix: "pgtest_testfoo_bar_baz_"},
		{name: "unicode", test: "TestÄ", prefix: "pgtest_test__"},
		{name: "long", test: strings.Repeat("x", 200), prefix: "pgtest_" + strings.Repeat("x", 40) + "_"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, b := databaseName(tt.test), databaseName(tt.test)
			if a == b {
				t.Fatalf("two calls gave the same name %q", a)
			}
			if !strings.HasPrefix(a, tt.prefix) || len(a) > 63 {
				t.Fatalf("databaseName(%q) = %q; want prefix %q, at most 63 bytes", tt.test, a, tt.prefix)
			}
		})
	}
}

func TestWithDatabase(t *testing.T) {
	for _, tt := range []struct {
		name, in, want string
		err            bool
	}{
		{name: "url", in: "postgres://u:p@127.0.0.1:5432/postgres?sslmode=disable", want: "postgres://u:p@127.0.0.1:5432/db1?sslmode=disable"},
		{name: "no path", in: "postgresql://127.0.0.1", want: "postgresql://127.0.0.1/db1"},
		{name: "dsn", in: "host=127.0.0.1", err: true},
		{name: "other scheme", in: "mysql://127.0.0.1/x", err: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := withDatabase(tt.in, "db1")
			if (err != nil) != tt.err || got != tt.want {
				t.Fatalf("withDatabase(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

// TestExternal_ReportedOnce runs TestExternal in a child process and wants
// it in the scenario report once, as ran: the skip it provokes to check
// Skip is not one of its scenarios.
func TestExternal_ReportedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report := filepath.Join(t.TempDir(), "report")
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestExternal$")
	cmd.Env = append(os.Environ(), envReport+"="+report)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("TestExternal: %v\n%s", err, out)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for line := range strings.Lines(string(data)) {
		if f := strings.Split(strings.TrimSuffix(line, "\n"), "\t"); len(f) == 4 && f[2] == "TestExternal" {
			outcomes = append(outcomes, f[3])
		}
	}
	if len(outcomes) != 1 || outcomes[0] != "ran" {
		t.Fatalf("TestExternal in the report as %q; want once, ran", outcomes)
	}
}

// TestSkip runs a test that calls Skip in a child process: it fails, naming
// the variable that would let it skip, unless that variable names it; the
// report lists it as not run either way.
func TestSkip(t *testing.T) {
	if os.Getenv("PGTEST_SKIP_CHILD") == "1" {
		Skip(t, "this machine cannot run the scenario")
		return
	}
	for _, tt := range []struct {
		name, allow string
		pass        bool
		out, report string
	}{
		{name: "fails", allow: "", pass: false, out: envAllowSkip + "=TestSkip", report: "NOT RUN: this machine cannot run the scenario"},
		{name: "skips when allowed", allow: "TestSkip", pass: true, out: "--- SKIP: TestSkip", report: "SKIPPED: this machine cannot run the scenario"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			report := filepath.Join(t.TempDir(), "report")
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSkip$", "-test.v")
			cmd.Env = append(os.Environ(), "PGTEST_SKIP_CHILD=1", envAllowSkip+"="+tt.allow, envReport+"="+report)
			out, err := cmd.CombinedOutput()
			if (err == nil) != tt.pass || !strings.Contains(string(out), tt.out) {
				t.Fatalf("child: %v, want passing %v and %q in:\n%s", err, tt.pass, tt.out, out)
			}
			lines, err := os.ReadFile(report)
			if err != nil || !strings.Contains(string(lines), "\tTestSkip\t"+tt.report) {
				t.Fatalf("report %q, %v; want TestSkip %q", lines, err, tt.report)
			}
		})
	}
}
