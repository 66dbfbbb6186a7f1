package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	sqlitedriver "modernc.org/sqlite"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/sqlitetx"
)

var _ allocator.Store = (*Store)(nil)

// Store is an allocator.Store in one SQLite file, for a single machine:
// several idmint processes on one host may share the file, processes on
// other machines may not (use the postgres store). It has the guarantees of
// the postgres store: the
// bump of max_id and the segment-log row commit in one transaction that
// takes the write lock up front (BEGIN IMMEDIATE), a request ID is granted at
// most once, and a commit survives a power cut before it is reported.
type Store struct {
	db *sql.DB
	// writeSlot lets one of this process's write transactions at a time ask
	// SQLite for the write lock: a Go channel queues them fairly and at once,
	// where SQLite's busy handler would make them sleep and poll. Other
	// processes still wait in the busy handler.
	writeSlot chan struct{}
}

// busyTimeout is how long a write waits for another process's transaction
// before it fails with "database is locked". Transactions here last
// milliseconds; a caller's context may end the wait sooner.
const busyTimeout = 10 * time.Second

// Open opens (creating if needed) the SQLite file at path. The schema
// is applied by migrations.Up on DB().
//
// Every connection runs in WAL mode, so readers never block the writer and
// processes sharing the file do not fail with "database is locked"; with
// synchronous=FULL, so that a granted segment is on disk before it is
// reported (NORMAL could lose the last grants to a power cut and grant their
// IDs again: a duplicate); with a busy timeout; with foreign keys on; and
// with transactions that take the write lock when they begin.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlite path %q: want a file name without '?' or '#'", path)
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return &Store{db: db, writeSlot: make(chan struct{}, 1)}, nil
}

// DB returns the database handle, for migrations.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// nowSQL is the current time as the schema stores it.
const nowSQL = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`

// Ping implements allocator.Store. It reads the tags table, so that a missing or
// unreadable file or schema shows, not just an open handle.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	err := s.db.QueryRowContext(ctx, `SELECT 1 FROM idmint_tags LIMIT 1`).Scan(&one)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("ping sqlite: %w", err)
	}
	return nil
}

// Prune deletes segment-log rows older than age.
func (s *Store) Prune(ctx context.Context, age time.Duration) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM idmint_segments WHERE granted_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)`,
			fmt.Sprintf("-%.3f seconds", age.Seconds()))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune segment log: %w", err)
	}
	return n, nil
}

// write runs fn in a transaction that holds the database's write lock from
// its start (the connections begin IMMEDIATE transactions) and commits it.
// An error from COMMIT wraps ErrAmbiguous: the transaction may be on disk.
func (s *Store) write(ctx context.Context, fn func(*sql.Tx) error) error {
	select {
	case s.writeSlot <- struct{}{}:
		defer func() { <-s.writeSlot }()
	case <-ctx.Done():
		return ctx.Err()
	}
	return sqlitetx.Write(ctx, s.db, allocator.ErrAmbiguous, fn)
}

// isConstraint reports whether err is the SQLite constraint violation code
// (an extended result code such as SQLITE_CONSTRAINT_PRIMARYKEY).
func isConstraint(err error, code int) bool {
	var e *sqlitedriver.Error
	return errors.As(err, &e) && e.Code() == code
}
