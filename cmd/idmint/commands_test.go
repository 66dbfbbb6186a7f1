package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"
)

// TestCLI_Table: every command of the table has a synopsis, and its --help,
// -h and `idmint help COMMAND` print its usage on stdout and exit 0; so do
// the groups' and idmint's own, which list every command.
func TestCLI_Table(t *testing.T) {
	top, _, err := runErr("--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			if c.synopsis == "" {
				t.Fatal("no synopsis")
			}
			if !strings.Contains(top, strings.TrimPrefix(strings.TrimSuffix(c.line(), " [flags]"), "idmint ")) {
				t.Errorf("idmint --help does not list %q", c.name)
			}
			name := strings.Fields(c.name)
			for _, args := range [][]string{append(name, "--help"), append(name, "-h"), append([]string{"help"}, name...)} {
				stdout, stderr, err := runErr(args...)
				if err != nil || stderr != "" || !strings.HasPrefix(stdout, "Usage: "+c.line()) {
					t.Errorf("idmint %s: err %v, stderr %q, stdout %q; want the usage on stdout", strings.Join(args, " "), err, stderr, stdout)
				}
			}
			// One default per flag: a default said in words is not
			// followed by the zero value that stands for it.
			stdout, _, _ := runErr(append(name, "--help")...)
			for line := range strings.SplitSeq(stdout, "\n") {
				if strings.Count(line, "(default ") > 1 {
					t.Errorf("idmint %s --help: two defaults in %q", c.name, strings.TrimSpace(line))
				}
			}
		})
	}
	for _, g := range groups {
		for _, args := range [][]string{{g.name, "--help"}, {"help", g.name}} {
			stdout, stderr, err := runErr(args...)
			if err != nil || stderr != "" {
				t.Errorf("idmint %s: %v %q", strings.Join(args, " "), err, stderr)
			}
			for _, c := range g.members() {
				if !strings.Contains(stdout, c.synopsis) {
					t.Errorf("idmint %s does not list %s", strings.Join(args, " "), c.name)
				}
			}
		}
	}
}

// TestCLI_UsageErrors: a mistake on the command line is said on stderr,
// naming what was wrong and pointing at the command's --help, and exits 2.
func TestCLI_UsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
		help string
	}{
		{"no command", nil, "Usage: idmint COMMAND", ""},
		{"unknown command", []string{"serf"}, `unknown command "serf"`, "idmint --help"},
		{"missing subcommand", []string{"tag"}, "missing command: one of create, list, set-step, bump, describe", "idmint tag --help"},
		{"unknown subcommand", []string{"token", "nope"}, `unknown command "nope"`, "idmint token --help"},
		{"missing argument", []string{"tag", "create"}, "missing NAME", "idmint tag create --help"},
		{"missing second argument", []string{"tag", "set-step", "order"}, "missing STEP", "idmint tag set-step --help"},
		{"unexpected argument", []string{"serve", "extra"}, `unexpected argument "extra"`, "idmint serve --help"},
		{"unexpected argument after flags", []string{"standby", "list", "--data-dir", "x", "more"}, `unexpected argument "more"`, "idmint standby list --help"},
		{"unknown flag", []string{"migrate", "--bogus"}, "flag provided but not defined: -bogus", "idmint migrate --help"},
		{"bad flag value", []string{"drill", "--duration", "soon"}, `invalid value "soon" for flag -duration`, "idmint drill --help"},
		{"missing flag", []string{"drill"}, "missing --target", "idmint drill --help"},
		{"help of nothing", []string{"help", "nope"}, `unknown command "nope"`, "idmint help --help"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := runErr(tt.args...)
			if !errors.Is(err, errUsage) || exitCode(err) != 2 {
				t.Fatalf("err = %v, want a usage error", err)
			}
			if stdout != "" || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, tt.help) {
				t.Fatalf("stdout %q, stderr %q; want %q and %q on stderr", stdout, stderr, tt.want, tt.help)
			}
		})
	}
}

// TestCLI_Docs: docs/cli.md is what the table writes, and README.md links it
// and names every command. IDMINT_UPDATE_DOCS=1 rewrites docs/cli.md.
func TestCLI_Docs(t *testing.T) {
	var want bytes.Buffer
	writeDocs(&want)
	path := filepath.Join("..", "..", "docs", "cli.md")
	if os.Getenv("IDMINT_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("docs/cli.md is stale: run IDMINT_UPDATE_DOCS=1 go test ./cmd/idmint -run TestCLI_Docs")
	}
	for _, c := range commands {
		if !strings.Contains(want.String(), "## idmint "+c.name+"\n") {
			t.Errorf("docs/cli.md has no section for %s", c.name)
		}
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "(docs/cli.md)") {
		t.Error("README.md does not link docs/cli.md")
	}
	for _, name := range commandNames() {
		if !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("README.md's command list does not name `%s`", name)
		}
	}
}

// TestCLI_Version: the module version, the revision and the Go version.
func TestCLI_Version(t *testing.T) {
	out := idmint(t, "version")
	if !strings.HasPrefix(out, "idmint ") || !strings.Contains(out, "revision ") || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("idmint version: %q", out)
	}
	bi := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := versionText(bi, true), "idmint v1.2.3\nrevision abc123 (modified)\ngo1.99\n"; got != want {
		t.Fatalf("versionText = %q, want %q", got, want)
	}
}

// TestCLI_DefaultDataDirUnwritable: with no database setting and a home
// directory that cannot hold the data directory (a container's), the error
// says what to set, not only the mkdir that failed.
func TestCLI_DefaultDataDirUnwritable(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	if err := os.WriteFile(home, nil, 0o600); err != nil { // a file: nothing can be made under it
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("IDMINT_DATABASE_URL", "")
	t.Setenv("IDMINT_DATA_DIR", "")
	_, _, err := runErr("tag", "list")
	if err == nil || !strings.Contains(err.Error(), "IDMINT_DATABASE_URL") || !strings.Contains(err.Error(), "IDMINT_DATA_DIR") {
		t.Fatalf("tag list with an unwritable home: %v; want it to say what to set", err)
	}
}

// TestCLI_TagsAndDatabase: the tag and token commands say on stderr which
// database they used; tag create refuses --step 0 (which the store would
// take for the default) and tag list shows the default max_step as such.
func TestCLI_TagsAndDatabase(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("IDMINT_DATABASE_URL", "")
	t.Setenv("IDMINT_DATA_DIR", dir)
	for _, args := range [][]string{{"tag", "list"}, {"token", "list"}} {
		_, stderr, err := runErr(args...)
		if err != nil || stderr != "idmint: database SQLite "+filepath.Join(dir, sqliteFile)+"\n" {
			t.Fatalf("idmint %s: %v, stderr %q; want one line naming the SQLite file", strings.Join(args, " "), err, stderr)
		}
	}
	_, _, err := runErr("tag", "create", "order", "--step", "0")
	if err == nil || !strings.Contains(err.Error(), "--step 0: want at least 1") {
		t.Fatalf("tag create --step 0: %v; want a refusal naming the minimum", err)
	}
	if out := idmint(t, "tag", "list"); strings.Contains(out, "order") {
		t.Fatalf("a refused tag was created: %s", out)
	}
	idmint(t, "tag", "create", "order")
	idmint(t, "tag", "create", "user", "--max-step", "5000")
	out := idmint(t, "tag", "list")
	if !strings.Contains(out, "1000000 (default)") || !strings.Contains(out, "5000") || strings.Contains(out, " - ") {
		t.Fatalf("tag list: %s; want the effective max_step, the default marked", out)
	}

	// The runway: per tag at create and update, the instance's by default.
	idmint(t, "tag", "create", "slow", "--runway", "30m")
	if out := idmint(t, "tag", "update", "user", "--runway", "1h30m"); !strings.Contains(out, "1h30m0s") {
		t.Fatalf("tag update --runway: %s", out)
	}
	out = idmint(t, "tag", "list")
	if !strings.Contains(out, "RUNWAY") || !strings.Contains(out, "30m0s") || !strings.Contains(out, "1h30m0s") || !strings.Contains(out, "(instance)") {
		t.Fatalf("tag list: %s; want each tag's runway, the instance's marked", out)
	}
	for _, bad := range [][]string{{"tag", "update", "user", "--runway", "25h"}, {"tag", "create", "neg", "--runway", "-1s"}} {
		if _, _, err := runErr(bad...); err == nil || !strings.Contains(err.Error(), "runway") {
			t.Fatalf("idmint %s: %v; want a refusal naming the runway", strings.Join(bad, " "), err)
		}
	}
	if _, _, err := runErr("serve", "--runway", "-1s"); err == nil || !strings.Contains(err.Error(), "--runway") {
		t.Fatalf("serve --runway -1s: %v; want a refusal", err)
	}
}

// TestStoreConfig_URLSource: a PostgreSQL URL is named by where it came
// from, never by its contents.
func TestStoreConfig_URLSource(t *testing.T) {
	const url = "postgres://u:secret@db/idmint"
	t.Setenv("IDMINT_DATABASE_URL", url)
	if got := (storeConfig{url: url}).urlSource(); got != "IDMINT_DATABASE_URL" {
		t.Errorf("from the environment: %s", got)
	}
	if got := (storeConfig{url: "postgres://other/db"}).urlSource(); got != "--database-url" {
		t.Errorf("from the flag: %s", got)
	}
	os.Unsetenv("IDMINT_DATABASE_URL")
	file := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(file, []byte(url+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("IDMINT_DATABASE_URL_FILE", file)
	if got := (storeConfig{url: url}).urlSource(); got != "IDMINT_DATABASE_URL_FILE" {
		t.Errorf("from a file: %s", got)
	}
}

// TestStack_Close: parts stop last first, each with the context given, and
// one that fails does not keep the others running.
func TestStack_Close(t *testing.T) {
	var s stack
	var order []string
	ctx := context.WithValue(context.Background(), stackKey{}, "shutdown")
	for _, name := range []string{"listener", "store", "allocator", "lease"} {
		s.push(name, func(ctx context.Context) error {
			if ctx.Value(stackKey{}) != "shutdown" {
				t.Errorf("%s closed without the shutdown context", name)
			}
			order = append(order, name)
			if name == "allocator" {
				return errors.New("give-back failed")
			}
			return nil
		})
	}
	logs := &testlog.Buffer{}
	s.close(ctx, slog.New(slog.NewJSONHandler(logs, nil)))
	if got := strings.Join(order, ","); got != "lease,allocator,store,listener" {
		t.Fatalf("closed %s", got)
	}
	if !strings.Contains(logs.String(), "give-back failed") {
		t.Fatalf("the failure was not logged: %s", logs)
	}
	s.close(ctx, slog.New(slog.NewJSONHandler(logs, nil)))
	if len(order) != 4 {
		t.Fatal("a second close closed again")
	}
}

type stackKey struct{}

// TestServe_EarlyFailureReleasesLease: serve fails after the Snowflake
// worker ID was leased (the CPU profile cannot be written), and the lease
// is released at once rather than held until it expires.
func TestServe_EarlyFailureReleasesLease(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("IDMINT_DATABASE_URL", "")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := run(ctx, []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0",
		"--cpu-profile", filepath.Join(dir, "no", "such", "dir", "cpu.out")}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--cpu-profile") {
		t.Fatalf("serve with an unwritable profile: %v", err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, sqliteFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var leased, held int
	if err := db.QueryRow(`SELECT COUNT(*), COALESCE(SUM(released = 0), 0) FROM idmint_snowflake_workers`).Scan(&leased, &held); err != nil {
		t.Fatal(err)
	}
	if leased == 0 || held != 0 {
		t.Fatalf("%d worker ids leased, %d still held after serve failed; want the lease released", leased, held)
	}
}

// TestServe_PortInUse: a port in use is found before anything is opened:
// no migration, no SQLite file, no lease.
func TestServe_PortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	t.Setenv("IDMINT_DATABASE_URL", "")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = run(ctx, []string{"serve", "--data-dir", dir, "--listen", ln.Addr().String()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "listen on") {
		t.Fatalf("serve on a port in use: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, sqliteFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the SQLite file was made before the port was found in use: %v", err)
	}
}
