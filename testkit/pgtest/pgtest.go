package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server kinds reported by Server.Kind.
const (
	KindExternal       = "external"
	KindTestcontainers = "testcontainers"
	KindLocal          = "local"
)

// Environment variables read by pgtest.
const (
	envDatabaseURL = "IDMINT_TEST_DATABASE_URL"
	envMode        = "IDMINT_TEST_PG"
	envImage       = "IDMINT_TEST_POSTGRES_IMAGE"
	envBin         = "IDMINT_TEST_PG_BIN"
)

const (
	defaultImage = "postgres:17-alpine"
	startTimeout = 3 * time.Minute
	readyTimeout = time.Minute
	stopTimeout  = time.Minute
	// maxConnections leaves room for tests that run many instances, each
	// with its own pool, against one server.
	maxConnections = "300"
)

// Server is a running PostgreSQL server. Its methods are safe for concurrent
// use, but Stop, Start and Restart affect every test using the server.
type Server struct {
	kind string
	url  string // admin URL: superuser, database postgres

	mu      sync.Mutex // serialises Stop, Start, Restart and close
	backend backend    // nil for an external server
	stopped bool       // guarded by mu
}

// backend is a server pgtest started and can stop again.
type backend interface {
	// stop shuts the server down: fast (clients disconnected, checkpoint) or
	// immediate (like a crash: the next start runs recovery).
	stop(ctx context.Context, immediate bool) error
	// start starts a stopped server on the same address.
	start(ctx context.Context) error
	// close stops the server and removes everything it used.
	close(ctx context.Context) error
}

// URL returns the admin URL of the server: a superuser connected to the
// database postgres. Tests should work in a database from NewDatabase.
func (s *Server) URL() string { return s.url }

// Kind says where the server comes from: "external", "testcontainers" or
// "local".
func (s *Server) Kind() string { return s.kind }

// NewDatabase creates a database with a unique name and returns its URL. The
// database is dropped (WITH (FORCE), closing leftover connections) when tb's
// test finishes.
func (s *Server) NewDatabase(tb testing.TB) string {
	tb.Helper()
	name := databaseName(tb.Name())
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := s.exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		if err := s.exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	u, err := withDatabase(s.url, name)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return u
}

// Stop shuts the server down, keeping its data and address. With immediate
// it is stopped like a crash (PostgreSQL's immediate mode, or the container
// killed), and the next Start runs crash recovery; otherwise it is a fast
// shutdown. An external server cannot be stopped: the test is skipped.
func (s *Server) Stop(tb testing.TB, immediate bool) {
	tb.Helper()
	b := s.controllable(tb)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := b.stop(ctx, immediate); err != nil {
		tb.Fatalf("pgtest: stop %s server: %v", s.kind, err)
	}
	s.stopped = true
}

// Start starts a server stopped by Stop on the same URL and waits until it
// accepts connections. It does nothing if the server is running.
func (s *Server) Start(tb testing.TB) {
	tb.Helper()
	b := s.controllable(tb)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := b.start(ctx); err != nil {
		tb.Fatalf("pgtest: start %s server: %v", s.kind, err)
	}
	if err := waitReady(ctx, s.url); err != nil {
		tb.Fatalf("pgtest: start %s server: %v", s.kind, err)
	}
	s.stopped = false
}

// Restart stops the server (like a crash if immediate) and starts it again on
// the same URL, with its data. Connections open before it fail afterwards.
func (s *Server) Restart(tb testing.TB, immediate bool) {
	tb.Helper()
	s.Stop(tb, immediate)
	s.Start(tb)
}

func (s *Server) controllable(tb testing.TB) backend {
	tb.Helper()
	if s.backend == nil {
		Skip(tb, fmt.Sprintf("pgtest: cannot stop or start an %s server: use Owned or New, which start a server pgtest owns", s.kind))
	}
	return s.backend
}

func (s *Server) close(ctx context.Context) error {
	if s.backend == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.backend.close(ctx)
}

func (s *Server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// shared is the server behind Shared, and the one behind Owned when the
// shared one is external.
var shared struct {
	mu     sync.Mutex
	inMain bool
	server *Server
	err    error // the first start's failure, reported to every caller

	owned    *Server
	ownedErr error
}

// Main runs the package's tests with a lazily started shared server and stops
// it afterwards. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()

	code := m.Run()

	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.inMain = false
	for _, s := range []*Server{shared.server, shared.owned} {
		if s == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		if err := s.close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping the %s server: %v\n", s.kind, err)
			if code == 0 {
				code = 1
			}
		}
		cancel()
	}
	shared.server, shared.owned = nil, nil
	return code
}

// Shared returns the package's shared server, starting it on first use. It
// fails the test if no server can be had, saying what to install. The
// package's TestMain must call Main, which stops the server.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	s := sharedServer(tb)
	record(tb, s.kind, "ran")
	return s
}

// sharedServer is Shared without the report line.
func sharedServer(tb testing.TB) *Server {
	tb.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		tb.Fatal("pgtest: Shared needs the package's TestMain to run the tests through pgtest.Main: func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }")
	}
	if shared.server == nil && shared.err == nil {
		shared.server, shared.err = start()
	}
	if shared.err != nil {
		tb.Fatalf("pgtest: %v", shared.err)
	}
	return shared.server
}

// Owned returns a server that pgtest started and can stop and start, for
// tests that take the database away: the shared server, unless that one is
// external (IDMINT_TEST_DATABASE_URL); then a second server, from Docker or
// the local binaries, started on first use and stopped by Main. When this
// machine has neither, the test cannot run its scenario: see Skip.
func Owned(tb testing.TB) *Server {
	tb.Helper()
	s := sharedServer(tb)
	if s.backend != nil {
		record(tb, s.kind, "ran")
		return s
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.owned == nil && shared.ownedErr == nil {
		shared.owned, shared.ownedErr = startOwned()
	}
	if err := shared.ownedErr; err != nil {
		if errors.Is(err, errNoOwned) {
			Skip(tb, fmt.Sprintf("pgtest: the test stops the database, and the %s server cannot be stopped: %v", s.kind, err))
		}
		tb.Fatalf("pgtest: %v", err)
	}
	record(tb, shared.owned.kind, "ran")
	return shared.owned
}

// New starts a private server for tb, chosen like the shared one but never
// external (see Owned), and removes it when tb's test finishes. It suits
// tests that stop or restart the server while other tests keep using the
// shared one. Starting a server takes seconds: prefer Shared.
func New(tb testing.TB) *Server {
	tb.Helper()
	s, err := startOwned()
	if errors.Is(err, errNoOwned) {
		Skip(tb, fmt.Sprintf("pgtest: the test needs a private server it can stop: %v", err))
	}
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	record(tb, s.kind, "ran")
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := s.close(ctx); err != nil {
			tb.Errorf("pgtest: stopping the %s server: %v", s.kind, err)
		}
	})
	return s
}

// start chooses and starts a server (see the package documentation).
func start() (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	rawURL := os.Getenv(envDatabaseURL)
	switch mode := os.Getenv(envMode); mode {
	case "":
	case "external":
		if rawURL == "" {
			return nil, fmt.Errorf("%s=external needs %s", envMode, envDatabaseURL)
		}
		return startExternal(ctx, rawURL)
	case "docker":
		if err := dockerAvailable(ctx); err != nil {
			return nil, fmt.Errorf("%s=docker: %w", envMode, err)
		}
		return startDocker(ctx)
	case "local":
		bin, err := findBinaries()
		if err != nil {
			return nil, fmt.Errorf("%s=local: %w", envMode, err)
		}
		return startLocal(ctx, bin)
	default:
		return nil, fmt.Errorf("%s=%q: want external, docker, local or unset", envMode, mode)
	}

	if rawURL != "" {
		return startExternal(ctx, rawURL)
	}
	s, dockerErr, localErr := startDockerOrLocal(ctx)
	if s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("no PostgreSQL server for the tests: install Docker (and make its engine answer), "+
		"or install the PostgreSQL server binaries (e.g. apt-get install postgresql), "+
		"or set %s to an existing server's URL\n\tdocker: %v\n\tlocal: %v", envDatabaseURL, dockerErr, localErr)
}

// startDockerOrLocal starts a container, or a server from the local
// binaries when Docker cannot give one (no engine, or an engine offline
// without the image). With no server it returns why neither could.
func startDockerOrLocal(ctx context.Context) (s *Server, dockerErr, localErr error) {
	if dockerErr = dockerAvailable(ctx); dockerErr == nil {
		if s, dockerErr = startDocker(ctx); dockerErr == nil {
			return s, nil, nil
		}
	}
	bin, localErr := findBinaries()
	if localErr != nil {
		return nil, dockerErr, localErr
	}
	fallingBack(dockerErr)
	s, localErr = startLocal(ctx, bin)
	return s, dockerErr, localErr
}

// errNoOwned means pgtest can start no server of its own here: no Docker
// engine and no server binaries.
var errNoOwned = errors.New("no server pgtest can start and stop")

// startOwned starts a server pgtest owns, chosen like start but skipping an
// external one.
func startOwned() (*Server, error) {
	mode := os.Getenv(envMode)
	if mode == "docker" || mode == "local" || (mode == "" && os.Getenv(envDatabaseURL) == "") {
		return start()
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, dockerErr, localErr := startDockerOrLocal(ctx)
	if s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("%w: install Docker or the PostgreSQL server binaries (apt-get install postgresql)\n\tdocker: %v\n\tlocal: %v",
		errNoOwned, dockerErr, localErr)
}

func startExternal(ctx context.Context, rawURL string) (*Server, error) {
	if _, err := withDatabase(rawURL, "postgres"); err != nil {
		return nil, fmt.Errorf("%s: %w", envDatabaseURL, err)
	}
	if err := waitReady(ctx, rawURL); err != nil {
		return nil, fmt.Errorf("%s: %w", envDatabaseURL, err)
	}
	return &Server{kind: KindExternal, url: rawURL}, nil
}

// waitReady connects and runs a query until it works or ctx or readyTimeout
// ends, whichever comes first.
func waitReady(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var err error
	for {
		if err = ping(ctx, url); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server not ready: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func ping(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// withDatabase returns the URL rawURL with its database replaced by name.
func withDatabase(rawURL, name string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("want a postgres:// URL")
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// databaseName makes a unique database name that still says which test it
// belongs to: pgtest_<test name, sanitised and cut>_<random>.
func databaseName(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	readable := b.String()
	if len(readable) > 40 {
		readable = readable[:40]
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	return "pgtest_" + readable + "_" + hex.EncodeToString(suffix[:])
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start starts a server chosen like the shared one, for programs that are not
// tests (such as the HTTP benchmark). The caller must Close it.
func Start() (*Server, error) { return start() }

// Close stops a server from Start and removes everything it used. It does
// nothing for an external server.
func (s *Server) Close(ctx context.Context) error { return s.close(ctx) }

// fallingBack says once per process why a Docker engine that answers was
// not used: the tests then run on local binaries, which the report shows,
// but an image that could not be pulled deserves a line of its own.
func fallingBack(dockerErr error) {
	if dockerErr == nil || strings.HasPrefix(dockerErr.Error(), "no Docker engine answers") {
		return
	}
	fallbackOnce.Do(func() {
		fmt.Fprintf(os.Stderr, "pgtest: using local PostgreSQL binaries: %v\n", dockerErr)
	})
}

var fallbackOnce sync.Once
