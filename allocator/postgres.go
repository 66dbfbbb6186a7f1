package allocator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idmint/idmint/segment"
)

var (
	_ Store    = (*Postgres)(nil)
	_ Returner = (*Postgres)(nil)
)

// Postgres is the production Store: one row per tag in idmint_tags holds the
// high-water mark, and idmint_segments logs every granted segment by request
// ID.
type Postgres struct {
	pool *pgxpool.Pool
	repl *replicator // confirms grants on the standbys before they are served
	rtt  *RoundTrip  // measured on the pool's connections; nil over a given pool
}

// OpenPostgres connects to PostgreSQL. The pool's own settings come from the
// URL (pool_max_conns and friends).
func OpenPostgres(ctx context.Context, url string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "idmint"
	// A grant must be durable before its IDs are handed out: with
	// synchronous_commit off (a server, database or role default), a crash
	// could forget grants already served, and a restarted instance would
	// hand them out again.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	followFailover(cfg)
	rtt := NewRoundTrip(0, 0)
	measureRoundTrips(cfg, rtt)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return &Postgres{pool: pool, repl: newReplicator(DefaultReplication), rtt: rtt}, nil
}

// RoundTrip returns the store's measured round trip, for Config.RoundTrip
// (nil for a store made by NewPostgres: its pool's connections are not
// measured).
func (p *Postgres) RoundTrip() *RoundTrip { return p.rtt }

// NewPostgres returns a Postgres over an existing pool. Allocations pin
// synchronous_commit=on in their own transaction, so the pool's settings
// cannot make a grant less durable.
func NewPostgres(pool *pgxpool.Pool) *Postgres {
	return &Postgres{pool: pool, repl: newReplicator(DefaultReplication)}
}

// SetReplication replaces the store's ReplicationConfig (DefaultReplication
// until then). Call it before the store is used.
func (p *Postgres) SetReplication(cfg ReplicationConfig) { p.repl = newReplicator(cfg) }

// ReplicationStatus asks the server about its standbys (see
// ReplicationStatus).
func (p *Postgres) ReplicationStatus(ctx context.Context) (ReplicationStatus, error) {
	return p.repl.status(ctx, p.pool)
}

// Standbys lists the standbys recorded in idmint_standbys, newest first.
func (p *Postgres) Standbys(ctx context.Context) ([]StandbyRecord, error) {
	rows, err := p.pool.Query(ctx, `SELECT name, slot, timeline, first_seen, last_seen, COALESCE(last_flush_lsn::text, ''), forgotten_at
FROM idmint_standbys ORDER BY last_seen DESC, name`)
	if err != nil {
		return nil, fmt.Errorf("list standbys: %w", err)
	}
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (StandbyRecord, error) {
		var s StandbyRecord
		err := row.Scan(&s.Name, &s.Slot, &s.Timeline, &s.FirstSeen, &s.LastSeen, &s.LastFlushLSN, &s.ForgottenAt)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("list standbys: %w", err)
	}
	return recs, nil
}

// ForgetStandby marks a recorded standby forgotten: it no longer holds
// grants back until it is seen streaming again. It returns ErrNotFound when
// no standby of that name is recorded (or it is forgotten already). A
// standby that streams through a slot is released by dropping the slot
// instead; forgetting its row changes nothing.
func (p *Postgres) ForgetStandby(ctx context.Context, name string) error {
	tag, err := p.pool.Exec(ctx, `UPDATE idmint_standbys SET forgotten_at = now() WHERE name = $1 AND forgotten_at IS NULL`, name)
	if err != nil {
		return fmt.Errorf("forget standby %q: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("forget standby %q: %w", name, ErrNotFound)
	}
	return nil
}

// Pool returns the connection pool.
func (p *Postgres) Pool() *pgxpool.Pool { return p.pool }

// Close closes the pool.
func (p *Postgres) Close() { p.pool.Close() }

// allocateSQL bumps max_id and logs the request in ONE statement, so there
// is no moment where one happened without the other. The size wanted ($2) is
// bounded by the tag's step and max_step (default 1,000,000).
//
// A max_id below the instance's floor ($6) went back in time (a restored
// backup, a failover to a lagging replica): it is raised to the floor and the
// segment granted above it, so that the instance serves again and nobody is
// granted after it the IDs it was granted before. A caller's claimed floor
// ($7) counts too, bounded to $8 (MaxClaimedLead) above the max_id found, as
// FloorOf does. GREATEST never lowers max_id. The row is read FOR UPDATE, so that the max_id found (to report the
// repair) is the one the update moves, even when a concurrent allocation
// changed it meanwhile.
//
// A bump that would pass 2^63-1 matches no row: nothing changes, and the
// caller tells "exhausted" from "unknown tag". A request ID granted before
// makes the INSERT fail on the primary key, which rolls the bump back.
//
// The first CTE pins synchronous_commit=on for this statement's transaction,
// whatever the pool, role or database say: a grant must be durable (and, with
// synchronous standbys, replicated) before its IDs are handed out.
const allocateSQL = `
WITH durable AS (
    SELECT set_config('synchronous_commit', 'on', true) AS synchronous_commit
), wanted AS (
    SELECT t.biz_tag, t.max_id AS found,
           GREATEST(t.step, LEAST($2::bigint, COALESCE(t.max_step, $5::bigint)))::bigint AS size,
           GREATEST($6::bigint, CASE WHEN $7::bigint - t.max_id > $8::bigint THEN t.max_id + $8::bigint
                                     ELSE $7::bigint END) AS floor
    FROM idmint_tags t, durable WHERE t.biz_tag = $1
    FOR UPDATE OF t
), bumped AS (
    UPDATE idmint_tags t
    SET max_id = GREATEST(t.max_id, w.floor) + w.size, updated_at = now()
    FROM wanted w
    WHERE t.biz_tag = w.biz_tag AND GREATEST(t.max_id, w.floor) <= 9223372036854775807 - w.size
    RETURNING t.biz_tag, t.max_id - w.size + 1 AS first_id, t.max_id AS last_id, t.step, t.max_step, w.found, w.floor
), logged AS (
    INSERT INTO idmint_segments (request_id, biz_tag, first_id, last_id, instance, principal, holder_hash)
    SELECT $3, biz_tag, first_id, last_id, $4, $9, $10 FROM bumped
    RETURNING request_id
)
SELECT b.first_id, b.last_id, b.step, COALESCE(b.max_step, 0), b.found, b.floor
FROM bumped b, logged`

// Allocate implements Store. Once the grant commits, it waits until the
// standbys the ReplicationConfig requires have its WAL, on the same
// connection; if they do not in time, it returns an error wrapping
// ErrNotReplicated and the segment must not be served.
func (p *Postgres) Allocate(ctx context.Context, req Request) (Segment, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return Segment{}, fmt.Errorf("allocate: no connection, nothing sent: %w", err)
	}
	defer conn.Release()
	seg, err := p.allocate(ctx, conn, req)
	if err != nil {
		return Segment{}, err
	}
	if err := p.repl.confirm(ctx, conn); err != nil {
		return Segment{}, fmt.Errorf("allocate %q [%d, %d]: %w", req.Tag, seg.First, seg.Last, err)
	}
	return seg, nil
}

// allocate runs the allocation statement on conn.
func (p *Postgres) allocate(ctx context.Context, conn querier, req Request) (Segment, error) {
	seg := Segment{RequestID: req.ID, Tag: req.Tag, Holder: req.Holder}
	principal, hash := holderArgs(req.Holder)
	var floor int64
	err := conn.QueryRow(ctx, allocateSQL, req.Tag, req.Size, req.ID, req.Instance, int64(segment.DefaultMaxStep),
		req.Floor, req.ClaimedFloor, int64(MaxClaimedLead), principal, hash).
		Scan(&seg.First, &seg.Last, &seg.Step, &seg.MaxStep, &seg.FoundMaxID, &floor)
	if errors.Is(err, pgx.ErrNoRows) {
		return Segment{}, p.whyNoRow(ctx, req.Tag, req.Floor)
	}
	if err != nil {
		return Segment{}, classify("allocate", err)
	}
	seg.Repaired = seg.FoundMaxID < floor
	return seg, nil
}

// whyNoRow tells an unknown tag from an exhausted one after an allocation
// that changed nothing.
func (p *Postgres) whyNoRow(ctx context.Context, tag string, floor int64) error {
	var maxID int64
	err := p.pool.QueryRow(ctx, `SELECT max_id FROM idmint_tags WHERE biz_tag = $1`, tag).Scan(&maxID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %q", ErrUnknownTag, tag)
	case err != nil:
		// The allocation itself committed nothing: not ambiguous.
		return fmt.Errorf("allocate %q: %w", tag, err)
	}
	return fmt.Errorf("%w: %q at max_id %d (floor %d)", ErrExhausted, tag, maxID, floor)
}

// giveBackSQL lowers max_id to first-1 ($2 - 1) only if it is still last
// ($3), and in the same statement marks the log rows of the IDs given back
// (returned_from), so that the log alone explains every ID: the rows whose
// kept part reaches into [first, last] keep only what lies below first.
const giveBackSQL = `
WITH back AS (
    UPDATE idmint_tags SET max_id = $2 - 1, updated_at = now()
    WHERE biz_tag = $1 AND max_id = $3
    RETURNING biz_tag
), marked AS (
    UPDATE idmint_segments s SET returned_from = GREATEST(s.first_id, $2)
    FROM back
    WHERE s.biz_tag = back.biz_tag AND s.first_id <= $3
      AND COALESCE(s.returned_from - 1, s.last_id) >= $2
    RETURNING s.request_id
)
SELECT count(*) FROM back`

// GiveBack implements Returner with one compare-and-set statement.
func (p *Postgres) GiveBack(ctx context.Context, tag string, first, last int64) (bool, error) {
	if first < 1 || first > last {
		return false, fmt.Errorf("give back %q: invalid range [%d, %d]", tag, first, last)
	}
	var n int64
	if err := p.pool.QueryRow(ctx, giveBackSQL, tag, first, last).Scan(&n); err != nil {
		return false, fmt.Errorf("give back %q [%d, %d]: %w", tag, first, last, err)
	}
	return n == 1, nil
}

// lookupSQL reads a request's log row: what it kept (a give-back ends it at
// returned_from - 1, before first_id when it gave back all) and its holder.
const lookupSQL = `
SELECT s.biz_tag, s.first_id, COALESCE(s.returned_from - 1, s.last_id), t.step, COALESCE(t.max_step, 0),
       s.principal, s.holder_hash
FROM idmint_segments s JOIN idmint_tags t USING (biz_tag)
WHERE s.request_id = $1`

// Lookup implements Store. A segment found is confirmed on the standbys
// like a new grant (see Allocate) before it is returned.
func (p *Postgres) Lookup(ctx context.Context, id uuid.UUID) (Segment, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return Segment{}, fmt.Errorf("lookup request %s: %w", id, err)
	}
	defer conn.Release()
	seg := Segment{RequestID: id}
	var (
		principal *string
		hash      []byte
	)
	err = conn.QueryRow(ctx, lookupSQL, id).Scan(&seg.Tag, &seg.First, &seg.Last, &seg.Step, &seg.MaxStep, &principal, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return Segment{}, ErrNotFound
	}
	if err != nil {
		return Segment{}, fmt.Errorf("lookup request %s: %w", id, err)
	}
	if seg.Holder, err = scanHolder(principal, hash); err != nil {
		return Segment{}, fmt.Errorf("lookup request %s: %w", id, err)
	}
	if seg.Last < seg.First {
		// Its tag and holder, for the caller to tell who asks.
		return seg, fmt.Errorf("%w: request %s (%q from %d)", ErrGivenBack, id, seg.Tag, seg.First)
	}
	// The row is visible, so its commit is at or before the WAL written
	// now: confirm it like a new grant.
	if err := p.repl.confirm(ctx, conn); err != nil {
		return Segment{}, fmt.Errorf("lookup request %s [%d, %d]: %w", id, seg.First, seg.Last, err)
	}
	return seg, nil
}

// Ping implements Store.
func (p *Postgres) Ping(ctx context.Context) error {
	if err := p.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping postgres: %w", err)
	}
	return nil
}

// Prune deletes segment-log rows older than age. Lookups only ever need
// the last minutes; the log is kept longer for audits.
func (p *Postgres) Prune(ctx context.Context, age time.Duration) (int64, error) {
	tag, err := p.pool.Exec(ctx, `DELETE FROM idmint_segments WHERE granted_at < now() - $1::interval`, age)
	if err != nil {
		return 0, fmt.Errorf("prune segment log: %w", err)
	}
	return tag.RowsAffected(), nil
}

// classify sorts an error from the allocation statement:
//   - a unique violation on the request ID: granted before (ErrAlreadyGranted);
//   - an error about the connection or the server going away (SQLSTATE
//     class 08, 57P01-57P03, XX000), even in a *pgconn.PgError: it may come
//     from a pooler or a dying backend after the statement committed, so
//     it is ambiguous;
//   - any other error from the server (*pgconn.PgError): the statement
//     failed, so its implicit transaction committed nothing;
//   - an error pgconn knows happened before anything was sent: nothing
//     committed;
//   - anything else (connection lost, timeout after sending): the statement
//     may have committed (ErrAmbiguous).
func classify(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "23505" && pgErr.ConstraintName == "idmint_segments_pkey":
			return ErrAlreadyGranted
		case strings.HasPrefix(pgErr.Code, "08"), pgErr.Code == "57P01", pgErr.Code == "57P02",
			pgErr.Code == "57P03", pgErr.Code == "XX000":
			return fmt.Errorf("%s: %w: %w", op, ErrAmbiguous, err)
		}
		return fmt.Errorf("%s: server refused, nothing committed: %w", op, err)
	}
	if pgconn.SafeToRetry(err) {
		return fmt.Errorf("%s: not sent: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, ErrAmbiguous, err)
}
