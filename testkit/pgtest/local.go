package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// localPrefix starts the name of every temporary directory a local server
// lives in; ownerFile in it holds the PID of the test process that owns it.
const (
	localPrefix = "idmint-pgtest-"
	ownerFile   = "owner.pid"
)

// local is a throwaway cluster made with initdb and run with pg_ctl.
type local struct {
	bin  string              // directory holding initdb, pg_ctl and postgres
	dir  string              // temporary directory: socket, log, owner file
	data string              // data directory, inside dir
	port int                 // TCP port on 127.0.0.1, kept across restarts
	cred *syscall.Credential // run as this user (postgres) when we are root
}

// findBinaries returns the directory of the PostgreSQL server binaries:
// $IDMINT_TEST_PG_BIN, `pg_config --bindir`, the newest
// /usr/lib/postgresql/*/bin (Debian, Ubuntu), or the directory of pg_ctl on
// PATH.
func findBinaries() (string, error) {
	var candidates []string
	if dir := os.Getenv(envBin); dir != "" {
		candidates = append(candidates, dir)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	debian, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(debian, func(i, j int) bool { return versionOf(debian[i]) > versionOf(debian[j]) })
	candidates = append(candidates, debian...)
	candidates = append(candidates, "/usr/local/pgsql/bin")
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		candidates = append(candidates, filepath.Dir(p))
	}
	for _, dir := range candidates {
		if isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "pg_ctl")) && isExecutable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, pg_ctl, postgres) found; looked in " + strings.Join(candidates, ", "))
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// startLocal initialises a cluster in a new temporary directory and starts it
// on a free loopback port.
func startLocal(ctx context.Context, bin string) (_ *Server, err error) {
	l, err := newLocal(ctx, bin)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = l.close(context.Background())
		}
	}()
	if err := l.run(ctx, "initdb", "-D", l.data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, err
	}
	return l.serve(ctx)
}

// newLocal makes the temporary directory of a local server, owned by the
// user the server will run as, with the owner file that lets a later run
// reap it. The data directory inside it does not exist yet.
func newLocal(ctx context.Context, bin string) (_ *local, err error) {
	l := &local{bin: bin}
	if l.cred, err = ServerUser(); err != nil {
		return nil, err
	}
	reapLocal(ctx, l.cred)

	if l.dir, err = os.MkdirTemp("", localPrefix); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = l.close(context.Background())
		}
	}()
	if err := os.WriteFile(filepath.Join(l.dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, err
	}
	if l.cred != nil {
		if err := os.Chown(l.dir, int(l.cred.Uid), int(l.cred.Gid)); err != nil {
			return nil, err
		}
	}
	l.data = filepath.Join(l.dir, "data")
	return l, nil
}

// serve configures the data directory for this machine (loopback, its own
// socket directory, a free port) and starts the server.
func (l *local) serve(ctx context.Context) (_ *Server, err error) {
	conf := fmt.Sprintf("\n# pgtest\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n"+
		"fsync = off\nmax_connections = %s\n", l.dir, maxConnections)
	if err := appendFile(filepath.Join(l.data, "postgresql.conf"), conf); err != nil {
		return nil, err
	}

	// The port is free when chosen but may be taken before the server binds
	// it; try a few.
	for attempt := 1; ; attempt++ {
		if l.port, err = freePort(); err != nil {
			return nil, err
		}
		if err = appendFile(filepath.Join(l.data, "postgresql.conf"), fmt.Sprintf("port = %d\n", l.port)); err != nil {
			return nil, err
		}
		if err = l.start(ctx); err == nil || attempt == 3 || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	s := &Server{
		kind:    KindLocal,
		url:     fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", l.port),
		backend: l,
	}
	if err := waitReady(ctx, s.url); err != nil {
		return nil, err
	}
	return s, nil
}

func (l *local) start(ctx context.Context) error {
	return l.run(ctx, "pg_ctl", "-D", l.data, "-l", filepath.Join(l.dir, "postgres.log"), "-w", "-t", "60", "start")
}

func (l *local) stop(ctx context.Context, immediate bool) error {
	mode := "fast"
	if immediate {
		mode = "immediate"
	}
	return l.run(ctx, "pg_ctl", "-D", l.data, "-m", mode, "-w", "-t", "60", "stop")
}

func (l *local) close(ctx context.Context) error {
	var err error
	if _, statErr := os.Stat(filepath.Join(l.data, "postmaster.pid")); statErr == nil {
		err = l.stop(ctx, true)
	}
	return errors.Join(err, os.RemoveAll(l.dir))
}

// run runs one of the server binaries, as the postgres user when we are root,
// and returns its output in the error when it fails.
func (l *local) run(ctx context.Context, name string, args ...string) error {
	return runAs(ctx, l.cred, l.dir, filepath.Join(l.bin, name), args...)
}

func runAs(ctx context.Context, cred *syscall.Credential, dir, path string, args ...string) error {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "LC_ALL=C")
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	// pg_ctl start leaves the server running with our pipes as its output
	// unless -l is given (it is); WaitDelay bounds the wait for them anyway.
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(path), strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// cleanEnv is the environment without libpq's and the server's variables,
// which would otherwise change what initdb and pg_ctl do.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// reapLocal removes the servers of earlier test processes that died before
// cleaning up (a test timeout, a kill): directories whose owner is gone.
func reapLocal(ctx context.Context, cred *syscall.Credential) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), localPrefix+"*"))
	for _, dir := range dirs {
		raw, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			// Being created right now, or not ours to judge.
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || processAlive(pid) {
			continue
		}
		data := filepath.Join(dir, "data")
		if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err == nil {
			if bin, err := findBinaries(); err == nil {
				_ = runAs(ctx, cred, dir, filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "-t", "30", "stop")
			}
		}
		_ = os.RemoveAll(dir)
	}
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	return errors.Join(err, f.Close())
}
