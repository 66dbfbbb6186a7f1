package allocator

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/idmint/idmint/internal/sqlitetx"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

var (
	_ Store    = (*SQLite)(nil)
	_ Admin    = (*SQLite)(nil)
	_ Returner = (*SQLite)(nil)
)

// SQLite is a Store in one SQLite file, for a single machine: several
// idmint processes on one host may share the file, processes on other
// machines may not (use Postgres). It has the guarantees of Postgres: the
// bump of max_id and the segment-log row commit in one transaction that
// takes the write lock up front (BEGIN IMMEDIATE), a request ID is granted at
// most once, and a commit survives a power cut before it is reported.
type SQLite struct {
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

// OpenSQLite opens (creating if needed) the SQLite file at path. The schema
// is applied by migrations.Up on DB().
//
// Every connection runs in WAL mode, so readers never block the writer and
// processes sharing the file do not fail with "database is locked"; with
// synchronous=FULL, so that a granted segment is on disk before it is
// reported (NORMAL could lose the last grants to a power cut and grant their
// IDs again: a duplicate); with a busy timeout; with foreign keys on; and
// with transactions that take the write lock when they begin.
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
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
	return &SQLite{db: db, writeSlot: make(chan struct{}, 1)}, nil
}

// DB returns the database handle, for migrations.
func (s *SQLite) DB() *sql.DB { return s.db }

// Close closes the database.
func (s *SQLite) Close() error { return s.db.Close() }

// nowSQL is the current time as the schema stores it.
const nowSQL = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`

// Allocate implements Store.
//
// The transaction holds the write lock from its first statement, so nothing
// changes max_id between the read and the update. An error before COMMIT
// rolls everything back; an error from COMMIT itself (an I/O error while
// writing the WAL) leaves the outcome unknown and wraps ErrAmbiguous.
func (s *SQLite) Allocate(ctx context.Context, req Request) (Segment, error) {
	seg := Segment{RequestID: req.ID, Tag: req.Tag}
	err := s.write(ctx, func(tx *sql.Tx) error {
		var maxID int64
		err := tx.QueryRowContext(ctx, `SELECT max_id, step, COALESCE(max_step, 0) FROM idmint_tags WHERE biz_tag = ?`, req.Tag).
			Scan(&maxID, &seg.Step, &seg.MaxStep)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %q", ErrUnknownTag, req.Tag)
		}
		if err != nil {
			return err
		}
		size := bounds(req.Size, seg.Step, seg.MaxStep)
		// A max_id below the instance's floor (or a caller's, bounded)
		// went back in time: raise it to the floor, in this transaction,
		// and grant above.
		floor := FloorOf(maxID, req)
		base := max(maxID, floor)
		if base > math.MaxInt64-size {
			return fmt.Errorf("%w: %q at max_id %d", ErrExhausted, req.Tag, base)
		}
		seg.First, seg.Last = base+1, base+size
		seg.Repaired, seg.FoundMaxID, seg.Holder = maxID < floor, maxID, req.Holder
		if _, err := tx.ExecContext(ctx, `UPDATE idmint_tags SET max_id = ?, updated_at = `+nowSQL+` WHERE biz_tag = ?`, seg.Last, req.Tag); err != nil {
			return err
		}
		principal, hash := holderArgs(req.Holder)
		_, err = tx.ExecContext(ctx, `INSERT INTO idmint_segments (request_id, biz_tag, first_id, last_id, instance, principal, holder_hash) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			req.ID.String(), req.Tag, seg.First, seg.Last, req.Instance, principal, hash)
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
			return ErrAlreadyGranted
		}
		return err
	})
	if err != nil {
		return Segment{}, fmt.Errorf("allocate %q: %w", req.Tag, err)
	}
	return seg, nil
}

// GiveBack implements Returner with one compare-and-set statement, and
// records the give-back in the segment log in the same transaction.
func (s *SQLite) GiveBack(ctx context.Context, tag string, first, last int64) (bool, error) {
	if first < 1 || first > last {
		return false, fmt.Errorf("give back %q: invalid range [%d, %d]", tag, first, last)
	}
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE idmint_tags SET max_id = ?, updated_at = `+nowSQL+` WHERE biz_tag = ? AND max_id = ?`,
			first-1, tag, last)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n != 1 {
			return err
		}
		// As in Postgres: the log rows of the IDs given back keep only
		// what lies below first.
		_, err = tx.ExecContext(ctx, `UPDATE idmint_segments SET returned_from = MAX(first_id, ?)
WHERE biz_tag = ? AND first_id <= ? AND COALESCE(returned_from - 1, last_id) >= ?`, first, tag, last, first)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("give back %q [%d, %d]: %w", tag, first, last, err)
	}
	return n == 1, nil
}

// Lookup implements Store.
func (s *SQLite) Lookup(ctx context.Context, id uuid.UUID) (Segment, error) {
	seg := Segment{RequestID: id}
	var (
		principal *string
		hash      []byte
	)
	err := s.db.QueryRowContext(ctx, `
SELECT s.biz_tag, s.first_id, COALESCE(s.returned_from - 1, s.last_id), t.step, COALESCE(t.max_step, 0),
       s.principal, s.holder_hash
FROM idmint_segments s JOIN idmint_tags t USING (biz_tag)
WHERE s.request_id = ?`, id.String()).Scan(&seg.Tag, &seg.First, &seg.Last, &seg.Step, &seg.MaxStep, &principal, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return Segment{}, ErrNotFound
	}
	if err == nil {
		seg.Holder, err = scanHolder(principal, hash)
	}
	if err != nil {
		return Segment{}, fmt.Errorf("lookup request %s: %w", id, err)
	}
	if seg.Last < seg.First {
		return seg, fmt.Errorf("%w: request %s (%q from %d)", ErrGivenBack, id, seg.Tag, seg.First)
	}
	return seg, nil
}

// Ping implements Store. It reads the tags table, so that a missing or
// unreadable file or schema shows, not just an open handle.
func (s *SQLite) Ping(ctx context.Context) error {
	var one int
	err := s.db.QueryRowContext(ctx, `SELECT 1 FROM idmint_tags LIMIT 1`).Scan(&one)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("ping sqlite: %w", err)
	}
	return nil
}

// Prune deletes segment-log rows older than age.
func (s *SQLite) Prune(ctx context.Context, age time.Duration) (int64, error) {
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

// CreateTag implements Admin.
func (s *SQLite) CreateTag(ctx context.Context, spec TagSpec) (Tag, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return Tag{}, err
	}
	var t Tag
	err = s.write(ctx, func(tx *sql.Tx) error {
		var err error
		t, err = scanTag(tx.QueryRowContext(ctx, `
INSERT INTO idmint_tags (biz_tag, max_id, step, max_step, description)
VALUES (?, ?, ?, NULLIF(?, 0), ?)
RETURNING `+tagColumns, spec.Name, spec.Start-1, spec.Step, spec.MaxStep, spec.Description))
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
			return fmt.Errorf("%w: %q", ErrExists, spec.Name)
		}
		return err
	})
	return t, err
}

// Tags implements Admin.
func (s *SQLite) Tags(ctx context.Context) ([]Tag, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+tagColumns+` FROM idmint_tags ORDER BY biz_tag`)
	if err != nil {
		return nil, fmt.Errorf("list tags: %w", err)
	}
	defer rows.Close()
	var tags []Tag
	for rows.Next() {
		t, err := scanTag(rows)
		if err != nil {
			return nil, fmt.Errorf("list tags: %w", err)
		}
		tags = append(tags, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tags: %w", err)
	}
	return tags, nil
}

// SetStep implements Admin.
func (s *SQLite) SetStep(ctx context.Context, name string, step, maxStep int64) (Tag, error) {
	if err := checkSteps(step, maxStep); err != nil {
		return Tag{}, err
	}
	return s.updateTag(ctx, name, func(Tag) (string, []any, error) {
		return `step = ?, max_step = NULLIF(?, 0)`, []any{step, maxStep}, nil
	})
}

// Bump implements Admin. The new max_id is computed here rather than in SQL:
// SQLite turns an integer overflow into a float instead of failing.
func (s *SQLite) Bump(ctx context.Context, name string, to, by int64) (Tag, error) {
	if err := checkBump(to, by); err != nil {
		return Tag{}, err
	}
	var cur Tag
	t, err := s.updateTag(ctx, name, func(t Tag) (string, []any, error) {
		cur = t
		maxID, err := bumped(t, to, by)
		return `max_id = ?`, []any{maxID}, err
	})
	if errors.Is(err, ErrNotRaised) {
		return cur, err
	}
	return t, err
}

// updateTag reads the tag and applies the SET clause that change returns
// for it, in one write transaction.
func (s *SQLite) updateTag(ctx context.Context, name string, change func(Tag) (string, []any, error)) (Tag, error) {
	var t Tag
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		t, err = scanTag(tx.QueryRowContext(ctx, `SELECT `+tagColumns+` FROM idmint_tags WHERE biz_tag = ?`, name))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %q", ErrUnknownTag, name)
		}
		if err != nil {
			return err
		}
		set, args, err := change(t)
		if err != nil {
			return err
		}
		t, err = scanTag(tx.QueryRowContext(ctx,
			`UPDATE idmint_tags SET `+set+`, updated_at = `+nowSQL+` WHERE biz_tag = ? RETURNING `+tagColumns,
			append(args, name)...))
		return err
	})
	return t, err
}

// write runs fn in a transaction that holds the database's write lock from
// its start (the connections begin IMMEDIATE transactions) and commits it.
// An error from COMMIT wraps ErrAmbiguous: the transaction may be on disk.
func (s *SQLite) write(ctx context.Context, fn func(*sql.Tx) error) error {
	select {
	case s.writeSlot <- struct{}{}:
		defer func() { <-s.writeSlot }()
	case <-ctx.Done():
		return ctx.Err()
	}
	return sqlitetx.Write(ctx, s.db, ErrAmbiguous, fn)
}

// isConstraint reports whether err is the SQLite constraint violation code
// (an extended result code such as SQLITE_CONSTRAINT_PRIMARYKEY).
func isConstraint(err error, code int) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code() == code
}
