package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idmint/idmint/internal/sqlitetx"
	"github.com/idmint/idmint/snowflake"
)

var _ snowflake.LeaseStore = (*SQLite)(nil)

// SQLite keeps the leases in the SQLite file (migration 00003). Its db must
// begin IMMEDIATE transactions, as allocator/sqlite's Open does, so that each
// step holds the write lock from its first statement: processes sharing the
// file take turns.
type SQLite struct {
	db *sql.DB
}

// NewSQLite returns the lease store over db.
func NewSQLite(db *sql.DB) *SQLite { return &SQLite{db: db} }

// sqliteNowMS is the clock in Unix milliseconds; SQLite's clock is this
// machine's, the one every process sharing the file reads.
const sqliteNowMS = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`

// Prepare implements snowflake.LeaseStore.
func (s *SQLite) Prepare(ctx context.Context, l snowflake.Layout) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
INSERT INTO idmint_snowflake_layout (id, epoch_ms, time_bits, worker_bits, sequence_bits)
VALUES (1, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			l.EpochMillis(), l.TimeBits, l.WorkerBits, l.SequenceBits); err != nil {
			return fmt.Errorf("record the layout: %w", err)
		}
		var have snowflake.Layout
		var epoch int64
		if err := tx.QueryRowContext(ctx, `SELECT epoch_ms, time_bits, worker_bits, sequence_bits FROM idmint_snowflake_layout WHERE id = 1`).
			Scan(&epoch, &have.TimeBits, &have.WorkerBits, &have.SequenceBits); err != nil {
			return fmt.Errorf("read the layout: %w", err)
		}
		have.Epoch = time.UnixMilli(epoch).UTC()
		if err := sameLayout(have, l); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `
WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
INSERT INTO idmint_snowflake_workers (worker_id, worker_bits)
SELECT n, ? FROM g WHERE true
ON CONFLICT (worker_id) DO NOTHING`, l.MaxWorker(), l.WorkerBits)
		if err != nil {
			return fmt.Errorf("create the worker rows: %w", err)
		}
		return nil
	})
}

// Acquire implements snowflake.LeaseStore: the choice and the update run in
// one transaction holding the write lock, as one step.
func (s *SQLite) Acquire(ctx context.Context, req snowflake.AcquireRequest) (snowflake.Lease, error) {
	l := snowflake.Lease{Holder: req.Holder}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT `+sqliteNowMS).Scan(&l.DBTime); err != nil {
			return err
		}
		var (
			released bool
			floor    int64
		)
		err := tx.QueryRowContext(ctx, `
SELECT worker_id, released, time_floor_ms FROM idmint_snowflake_workers
WHERE worker_id BETWEEN ? AND ? AND (released = 1 OR lease_expires_ms < ?)
ORDER BY released DESC, worker_id LIMIT 1`, req.MinWorker, req.MaxWorker, l.DBTime).Scan(&l.Worker, &released, &floor)
		if errors.Is(err, sql.ErrNoRows) {
			return snowflake.ErrAllHeld
		}
		if err != nil {
			return err
		}
		l.Start = startAfter(floor, released, req.Margin)
		l.Expires = l.DBTime + req.TTL.Milliseconds()
		return tx.QueryRowContext(ctx, `
UPDATE idmint_snowflake_workers
SET holder = ?, epoch = epoch + 1, released = 0, lease_expires_ms = ?,
    time_floor_ms = max(time_floor_ms, ?), updated_at = `+nowSQL+`
WHERE worker_id = ? RETURNING epoch`, req.Holder, l.Expires, l.Expires-req.Margin.Milliseconds(), l.Worker).Scan(&l.Epoch)
	})
	if errors.Is(err, snowflake.ErrAllHeld) {
		return snowflake.Lease{}, err
	}
	if err != nil {
		return snowflake.Lease{}, fmt.Errorf("acquire a worker id: %w", err)
	}
	return l, nil
}

// Renew implements snowflake.LeaseStore.
func (s *SQLite) Renew(ctx context.Context, l snowflake.Lease, ttl, margin time.Duration) (snowflake.Lease, error) {
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT `+sqliteNowMS).Scan(&l.DBTime); err != nil {
			return err
		}
		l.Expires = l.DBTime + ttl.Milliseconds()
		res, err := tx.ExecContext(ctx, `
UPDATE idmint_snowflake_workers
SET lease_expires_ms = ?, time_floor_ms = max(time_floor_ms, ?), updated_at = `+nowSQL+`
WHERE worker_id = ? AND epoch = ? AND holder = ? AND released = 0`,
			l.Expires, l.Expires-margin.Milliseconds(), l.Worker, l.Epoch, l.Holder)
		return heldOne(res, err, l)
	})
	if err != nil {
		return snowflake.Lease{}, fmt.Errorf("renew worker id %d: %w", l.Worker, err)
	}
	return l, nil
}

// Release implements snowflake.LeaseStore.
func (s *SQLite) Release(ctx context.Context, l snowflake.Lease, floor int64) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
UPDATE idmint_snowflake_workers
SET released = 1, lease_expires_ms = 0, time_floor_ms = ?, updated_at = `+nowSQL+`
WHERE worker_id = ? AND epoch = ? AND holder = ? AND released = 0`, max(floor, 0), l.Worker, l.Epoch, l.Holder)
		return heldOne(res, err, l)
	})
	if err != nil {
		return fmt.Errorf("release worker id %d: %w", l.Worker, err)
	}
	return nil
}

// heldOne turns the result of an update that names a lease's epoch into
// ErrLeaseLost when it matched no row.
func heldOne(res sql.Result, err error, l snowflake.Lease) error {
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(fmt.Errorf("%w: worker id %d epoch %d", snowflake.ErrLeaseLost, l.Worker, l.Epoch), err)
	}
	return nil
}

// nowSQL is the current time as the schema stores it.
const nowSQL = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`

// write runs fn in a transaction (IMMEDIATE on idmint's connections) and
// commits it. An error from COMMIT wraps ErrOutcomeUnknown: the acquire, renewal
// or release may be on disk.
func (s *SQLite) write(ctx context.Context, fn func(*sql.Tx) error) error {
	return sqlitetx.Write(ctx, s.db, ErrOutcomeUnknown, fn)
}
