package main

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/allocator/sqlite"
	"github.com/idmint/idmint/migrations"
	"github.com/idmint/idmint/token"

	_ "github.com/idmint/idmint/internal/redact/pgsecrets" // redacts connect errors
)

// storeConfig chooses the store: PostgreSQL or a SQLite file by the scheme
// of the database URL, or with no URL the SQLite file in the data directory
// (single-machine mode).
type storeConfig struct {
	url     string
	dataDir string
}

// register adds the flags that choose the store.
func (c *storeConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "database-url", "",
		"postgres://user:pass@host:5432/db for PostgreSQL, sqlite://PATH or file:PATH for a SQLite file; empty: the SQLite file in --data-dir")
	fs.StringVar(&c.dataDir, "data-dir", "",
		"directory of the SQLite file used when no --database-url is given (default $XDG_DATA_HOME/idmint or ~/.local/share/idmint)")
}

// sqliteFile is the name of the SQLite file in the data directory.
const sqliteFile = "idmint.db"

// openedStore is an open store with what the commands need to know of it.
type openedStore struct {
	store   allocator.Store
	admin   allocator.Admin
	tokens  token.Store
	dialect migrations.Dialect
	close   func()
	// applied lists the migrations this open applied; version is the
	// schema version after it.
	applied []int64
	version int64
	// firstRun is set when this open created the default SQLite file's
	// schema: the first start of the single-machine mode.
	firstRun bool
	// where names the database without credentials: "SQLite PATH" or
	// "PostgreSQL (IDMINT_DATABASE_URL)".
	where string
}

// openForCommand opens the store for a one-shot command (tag, token,
// standby): quietly, as logs would clutter its table, but saying on stderr
// which database it used, so that a forgotten IDMINT_DATA_DIR that made a
// second SQLite file is seen at once.
// storeFlags registers the store flags and returns a run that opens the
// store (saying which on stderr), calls do, and closes it: the shape of
// every command that works on the database directly.
func storeFlags(fs *flag.FlagSet, do func(ctx context.Context, store *openedStore, out output, args []string) error) runFunc {
	var sc storeConfig
	sc.register(fs)
	return func(ctx context.Context, out output, args []string) error {
		store, err := openForCommand(ctx, sc, out.stderr)
		if err != nil {
			return err
		}
		defer store.close()
		return do(ctx, store, out, args)
	}
}

func openForCommand(ctx context.Context, c storeConfig, stderr io.Writer) (*openedStore, error) {
	store, err := openStore(ctx, c, false, slog.New(slog.DiscardHandler), func(msg string) {
		fmt.Fprintln(stderr, "idmint:", msg)
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "idmint: database %s\n", store.where)
	return store, nil
}

// defaultFile is the SQLite file in the data directory, which it creates.
// When it cannot, it says what to set instead: in a container run without
// any database setting the home directory is often not writable.
func (c storeConfig) defaultFile() (string, error) {
	dir := c.dataDir
	if dir == "" {
		var err error
		if dir, err = defaultDataDir(); err != nil {
			return "", err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("cannot create the default data directory %s (%w): set IDMINT_DATABASE_URL (postgres://…) for PostgreSQL, or IDMINT_DATA_DIR (--data-dir) to a writable directory for the SQLite file", dir, err)
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	return filepath.Join(dir, sqliteFile), nil
}

// urlSource says where the database URL came from, without its contents.
func (c storeConfig) urlSource() string {
	const env = "IDMINT_DATABASE_URL"
	if v, ok := os.LookupEnv(env); ok && v == c.url {
		return env
	}
	if path, ok := os.LookupEnv(env + "_FILE"); ok {
		if b, err := os.ReadFile(path); err == nil && strings.TrimRight(string(b), "\r\n") == c.url {
			return env + "_FILE"
		}
	}
	return "--database-url"
}

// openStore opens the store c chooses and checks its schema, applying the
// migrations first when migrate is set. A SQLite file is always migrated:
// it belongs to idmint alone, and a new one must work at once. While a
// PostgreSQL server does not answer yet, waiting is told once.
func openStore(ctx context.Context, c storeConfig, migrate bool, logger *slog.Logger, waiting func(string)) (*openedStore, error) {
	dialect, path, err := parseDatabaseURL(c.url)
	if err != nil {
		return nil, err
	}
	if dialect == migrations.PostgreSQL {
		o, err := openPostgres(ctx, c.url, migrate, logger, waiting)
		if err != nil {
			return nil, err
		}
		// The URL holds credentials: only where it came from is said.
		o.where = "PostgreSQL (" + c.urlSource() + ")"
		return o, nil
	}
	embedded := path == ""
	if embedded {
		if path, err = c.defaultFile(); err != nil {
			return nil, err
		}
	}
	logger.Info("single-machine mode: IDs come from a SQLite file on this machine; several idmint processes on this host may share it, other machines need PostgreSQL (--database-url postgres://…)",
		"data", path)
	if dir := filepath.Dir(path); !embedded {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("sqlite file %s: its directory %s does not exist; create it first (the file itself is created)", path, dir)
		}
	}
	store, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	where := "SQLite " + path
	if abs, err := filepath.Abs(path); err == nil {
		where = "SQLite " + abs
	}
	o := &openedStore{store: store, admin: store, tokens: store, dialect: migrations.SQLite, close: func() { store.Close() }, where: where}
	if err := o.checkSchema(ctx, store.DB(), true, logger); err != nil {
		store.Close()
		return nil, err
	}
	o.firstRun = embedded && len(o.applied) > 0 && o.applied[0] == 1
	return o, nil
}

// openPostgres connects, optionally migrates, and checks that the schema is
// the one this binary knows.
func openPostgres(ctx context.Context, url string, migrate bool, logger *slog.Logger, waiting func(string)) (*openedStore, error) {
	store, err := postgres.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	// A database that cannot be reached is said so, not taken for one
	// that lacks its schema.
	if err := pingUntil(ctx, store, connectRetry, waiting); err != nil {
		store.Close()
		return nil, err
	}
	db := stdlib.OpenDBFromPool(store.Pool())
	defer db.Close()
	o := &openedStore{store: store, admin: store, tokens: store, dialect: migrations.PostgreSQL, close: store.Close}
	if err := o.checkSchema(ctx, db, migrate, logger); err != nil {
		store.Close()
		return nil, err
	}
	return o, nil
}

// connectRetry is how long a start waits for a database that is not
// answering yet.
const connectRetry = 10 * time.Second

// pinger is the store as pingUntil uses it.
type pinger interface {
	Ping(ctx context.Context) error
}

// pingUntil pings the store until it answers or limit passed. One ping is
// one connection attempt per host, each bounded by the URL's connect
// timeout (1 s per host of a multi-host URL): a server in the middle of a
// failover, or one too loaded to finish authentication in time, would fail
// a start that a second later succeeds. An answer that will not change
// (permanentConnectError) fails at once; the first transient failure is
// said once through waiting, with how long the wait lasts.
func pingUntil(ctx context.Context, store pinger, limit time.Duration, waiting func(string)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	pause := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := store.Ping(ctx)
		switch {
		case err == nil:
			return nil
		case permanentConnectError(err):
			return fmt.Errorf("the database refused the connection: %w", err)
		case attempt == 0:
			// One line, however many hosts and addresses pgconn tried.
			reason := strings.Join(strings.Fields(err.Error()), " ")
			waiting(fmt.Sprintf("cannot reach the database yet (%s); retrying for up to %s", reason, limit))
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("cannot reach the database after %s: %w", limit, err)
			}
			return fmt.Errorf("cannot reach the database: %w", err)
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// permanentConnectError reports whether a failed connection attempt got an
// answer that a retry would only repeat: the server refused the database,
// the role, the password or the privilege (SQLSTATE 3D000, 28000, 28P01,
// 42501, any error it sends but those below), or the server's certificate
// did not verify. Transient are the errors of a server that is starting,
// stopping or full (class 08 connection exception, class 53 insufficient
// resources such as 53300 too_many_connections, 57P01-57P03 shutting down or
// starting up) and every error without an answer: connection refused, a
// timeout, a name that does not resolve yet.
func permanentConnectError(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "53"),
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03":
			return false
		}
		return true
	}
	var certErr *tls.CertificateVerificationError
	return errors.As(err, &certErr)
}

// checkSchema applies the migrations if migrate is set, then checks that the
// schema is the one this binary knows.
func (o *openedStore) checkSchema(ctx context.Context, db *sql.DB, migrate bool, logger *slog.Logger) error {
	if migrate {
		applied, err := migrations.Up(ctx, db, o.dialect, logger)
		if err != nil {
			return err
		}
		o.applied = applied
	}
	current, latest, err := migrations.Version(ctx, db, o.dialect)
	if err != nil {
		return fmt.Errorf("%w (is the database migrated? run: idmint migrate)", err)
	}
	if current < latest {
		return fmt.Errorf("database schema is at version %d, this idmint needs %d: run idmint migrate (or serve --migrate)", current, latest)
	}
	o.version = current
	return nil
}

// parseDatabaseURL returns the dialect a database URL selects and, for
// SQLite, the file's path. An empty URL selects SQLite with no path: the
// default file in the data directory.
func parseDatabaseURL(url string) (migrations.Dialect, string, error) {
	switch {
	case url == "":
		return migrations.SQLite, "", nil
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return migrations.PostgreSQL, "", nil
	case strings.HasPrefix(url, "sqlite://"):
		// sqlite:///var/lib/idmint.db is absolute, sqlite://idmint.db relative.
		if path := strings.TrimPrefix(url, "sqlite://"); path != "" {
			return migrations.SQLite, path, nil
		}
	case strings.HasPrefix(url, "file:"):
		// file:///var/lib/idmint.db, file:/var/lib/idmint.db or file:idmint.db.
		path := strings.TrimPrefix(url, "file:")
		if strings.HasPrefix(path, "///") {
			path = path[2:]
		}
		if path != "" {
			return migrations.SQLite, path, nil
		}
	}
	return "", "", fmt.Errorf("database url %q: want postgres://…, postgresql://…, sqlite://PATH or file:PATH", redact(url))
}

// redact hides the password of a URL in an error message.
func redact(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return url
	}
	return scheme + "://…" + rest[at:]
}

// defaultDataDir is where the SQLite file lives when no --data-dir is given:
// $XDG_DATA_HOME/idmint, else ~/.local/share/idmint (the XDG default), so
// that the IDs survive the working directory and a reboot.
func defaultDataDir() (string, error) {
	if dir := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "idmint"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no data directory for the SQLite file (%w): set IDMINT_DATABASE_URL (postgres://…) for PostgreSQL, or IDMINT_DATA_DIR (--data-dir) for the SQLite file", err)
	}
	return filepath.Join(home, ".local", "share", "idmint"), nil
}

// firstRunTag is created on the first start of the single-machine mode, so
// that `curl 'localhost:8080/id?biz_tag=demo'` answers at once.
const firstRunTag = "demo"

// tagList is a flag naming tags, repeated or comma-separated.
type tagList []string

func (l *tagList) String() string { return strings.Join(*l, ",") }

func (l *tagList) Set(v string) error {
	for name := range strings.SplitSeq(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			if err := allocator.ValidateTag(name); err != nil {
				return err
			}
			*l = append(*l, name)
		}
	}
	return nil
}

// ensureTags creates, with the default step, each tag named that does not
// exist yet, and the demo tag on the first run of the single-machine mode.
// An operator names them; a request never creates a tag.
func ensureTags(ctx context.Context, o *openedStore, names tagList, logger *slog.Logger) error {
	if o.firstRun {
		names = append(names, firstRunTag)
	}
	for _, name := range names {
		t, err := o.admin.CreateTag(ctx, allocator.TagSpec{Name: name})
		switch {
		case errors.Is(err, allocator.ErrExists):
		case err != nil:
			return fmt.Errorf("create tag %q: %w", name, err)
		default:
			logger.Info("tag created", "biz_tag", t.Name, "step", t.Step)
		}
	}
	return nil
}

// pruner is a store whose segment log can be pruned.
type pruner interface {
	Prune(ctx context.Context, age time.Duration) (int64, error)
}
