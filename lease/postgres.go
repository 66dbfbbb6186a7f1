package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idmint/idmint/snowflake"

	_ "github.com/idmint/idmint/internal/redact/pgsecrets" // redacts connect errors
)

var _ snowflake.LeaseStore = (*Postgres)(nil)

// Postgres keeps the leases in PostgreSQL (migration 00003).
type Postgres struct {
	pool *pgxpool.Pool
}

// NewPostgres returns the lease store over pool.
func NewPostgres(pool *pgxpool.Pool) *Postgres { return &Postgres{pool: pool} }

// nowMS is the database's clock in Unix milliseconds. clock_timestamp, not
// now(): the time the statement runs, for the clock comparison.
const nowMS = `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`

// Prepare implements snowflake.LeaseStore.
func (p *Postgres) Prepare(ctx context.Context, l snowflake.Layout) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
INSERT INTO idmint_snowflake_layout (id, epoch_ms, time_bits, worker_bits, sequence_bits)
VALUES (1, $1, $2, $3, $4) ON CONFLICT (id) DO NOTHING`,
			l.EpochMillis(), l.TimeBits, l.WorkerBits, l.SequenceBits); err != nil {
			return fmt.Errorf("record the layout: %w", err)
		}
		var have snowflake.Layout
		var epoch int64
		if err := tx.QueryRow(ctx, `SELECT epoch_ms, time_bits, worker_bits, sequence_bits FROM idmint_snowflake_layout WHERE id = 1`).
			Scan(&epoch, &have.TimeBits, &have.WorkerBits, &have.SequenceBits); err != nil {
			return fmt.Errorf("read the layout: %w", err)
		}
		have.Epoch = time.UnixMilli(epoch).UTC()
		if err := sameLayout(have, l); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
INSERT INTO idmint_snowflake_workers (worker_id, worker_bits)
SELECT g, $1 FROM generate_series(0, $2::integer) g
ON CONFLICT (worker_id) DO NOTHING`, l.WorkerBits, l.MaxWorker())
		if err != nil {
			return fmt.Errorf("create the worker rows: %w", err)
		}
		return nil
	})
}

// acquireSQL takes the lowest released worker ID, else the lowest expired
// one, among $5…$2 (a region's slice), in one statement: the row is locked (rows other acquirers hold locked
// are skipped), its epoch bumped, its expiry and time floor set. The window
// starts after the floor the previous holder left, plus the margin ($4)
// when it did not release the row.
const acquireSQL = `
WITH now AS (SELECT ` + nowMS + ` AS ms),
candidate AS (
    SELECT w.worker_id, w.released, w.time_floor_ms
    FROM idmint_snowflake_workers w, now
    WHERE w.worker_id BETWEEN $5 AND $2 AND (w.released OR w.lease_expires_ms < now.ms)
    ORDER BY w.released DESC, w.worker_id
    LIMIT 1
    FOR UPDATE OF w SKIP LOCKED
)
UPDATE idmint_snowflake_workers w
SET holder = $1, epoch = w.epoch + 1, released = false,
    lease_expires_ms = now.ms + $3,
    time_floor_ms = GREATEST(w.time_floor_ms, now.ms + $3 - $4),
    updated_at = now()
FROM candidate c, now
WHERE w.worker_id = c.worker_id
RETURNING w.worker_id, w.epoch,
    CASE WHEN c.released THEN c.time_floor_ms + 1 ELSE c.time_floor_ms + $4 + 1 END,
    w.lease_expires_ms, now.ms`

// Acquire implements snowflake.LeaseStore.
func (p *Postgres) Acquire(ctx context.Context, req snowflake.AcquireRequest) (snowflake.Lease, error) {
	l := snowflake.Lease{Holder: req.Holder}
	err := p.pool.QueryRow(ctx, acquireSQL, req.Holder, req.MaxWorker, req.TTL.Milliseconds(), req.Margin.Milliseconds(), req.MinWorker).
		Scan(&l.Worker, &l.Epoch, &l.Start, &l.Expires, &l.DBTime)
	if errors.Is(err, pgx.ErrNoRows) {
		return snowflake.Lease{}, snowflake.ErrAllHeld
	}
	if err != nil {
		return snowflake.Lease{}, fmt.Errorf("acquire a worker id: %w", err)
	}
	return l, nil
}

// Renew implements snowflake.LeaseStore.
func (p *Postgres) Renew(ctx context.Context, l snowflake.Lease, ttl, margin time.Duration) (snowflake.Lease, error) {
	err := p.pool.QueryRow(ctx, `
WITH now AS (SELECT `+nowMS+` AS ms)
UPDATE idmint_snowflake_workers w
SET lease_expires_ms = now.ms + $4, time_floor_ms = GREATEST(w.time_floor_ms, now.ms + $4 - $5), updated_at = now()
FROM now
WHERE w.worker_id = $1 AND w.epoch = $2 AND w.holder = $3 AND NOT w.released
RETURNING w.lease_expires_ms, now.ms`, l.Worker, l.Epoch, l.Holder, ttl.Milliseconds(), margin.Milliseconds()).
		Scan(&l.Expires, &l.DBTime)
	if errors.Is(err, pgx.ErrNoRows) {
		return snowflake.Lease{}, fmt.Errorf("%w: worker id %d epoch %d", snowflake.ErrLeaseLost, l.Worker, l.Epoch)
	}
	if err != nil {
		return snowflake.Lease{}, fmt.Errorf("renew worker id %d: %w", l.Worker, err)
	}
	return l, nil
}

// Release implements snowflake.LeaseStore.
func (p *Postgres) Release(ctx context.Context, l snowflake.Lease, floor int64) error {
	tag, err := p.pool.Exec(ctx, `
UPDATE idmint_snowflake_workers
SET released = true, lease_expires_ms = 0, time_floor_ms = $4, updated_at = now()
WHERE worker_id = $1 AND epoch = $2 AND holder = $3 AND NOT released`, l.Worker, l.Epoch, l.Holder, max(floor, 0))
	if err != nil {
		return fmt.Errorf("release worker id %d: %w", l.Worker, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: worker id %d epoch %d", snowflake.ErrLeaseLost, l.Worker, l.Epoch)
	}
	return nil
}
