package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/sqlstore"
	"github.com/idmint/idmint/segment"
)

// allocateSQL bumps max_id and logs the request in ONE statement, so there
// is no moment where one happened without the other. The size wanted ($2) is
// bounded by the tag's step and max_step (default 1,000,000).
//
// A max_id below the instance's floor ($6) went back in time (a restored
// backup, a failover to a lagging replica): it is raised to the floor and the
// segment granted above it, so that the instance serves again and nobody is
// granted after it the IDs it was granted before. A caller's claimed floor
// ($7) counts too, bounded to its lead ($8, LeadOf) above the max_id found
// (or $6, if higher), as FloorOf does; with no lead at all, a claimed floor
// above them is refused (FloorRefused): nothing is bumped or logged, and the
// row says so. GREATEST never lowers max_id. The row is read FOR UPDATE, so
// that the max_id found (to report the repair and the lead) is the one the
// update moves, even when a concurrent allocation changed it meanwhile.
//
// The range starts at the next ID this database's region share owns above
// GREATEST(max_id, floor) (idmint_next_owned, migration 00010: the next ID
// itself without a share) and ends at the end of that ID's block at the
// latest: a range never crosses a block, so it lies in this region's share
// whole; max_id becomes its last ID. A share that owns nothing above
// (fenced by a region split) grants nothing, and the row says so
// (regioned, no range): ErrShareExhausted.
//
// A tag that does not exist returns no row. Without a share, a bump that
// would pass 2^63-1 matches no row of the update: nothing changes, and the
// row returned has no range. A request ID granted before makes the INSERT fail on the primary
// key, which rolls the bump back.
//
// The first CTE pins synchronous_commit=on for this statement's transaction,
// whatever the pool, role or database say: a grant must be durable (and, with
// synchronous standbys, replicated) before its IDs are handed out.
const allocateSQL = `
WITH durable AS (
    SELECT set_config('synchronous_commit', 'on', true) AS synchronous_commit
), found AS (
    SELECT t.biz_tag, t.max_id AS found, GREATEST(t.max_id, $6::bigint) AS base, t.step, t.max_step, t.runway_ms
    FROM idmint_tags t, durable WHERE t.biz_tag = $1
    FOR UPDATE OF t
), wanted AS (
    SELECT f.*,
           GREATEST(f.step, LEAST($2::bigint, COALESCE(f.max_step, $5::bigint)))::bigint AS size,
           GREATEST($6::bigint, CASE WHEN $7::bigint - f.base > $8::bigint THEN f.base + $8::bigint
                                     ELSE $7::bigint END) AS floor,
           $8::bigint = 0 AND $7::bigint > f.base AS refused
    FROM found f
), owned AS (
    SELECT w.biz_tag, w.size, o.first_id, o.regioned,
           CASE WHEN o.last_id - o.first_id < w.size - 1 THEN o.last_id ELSE o.first_id + (w.size - 1) END AS last_id
    FROM wanted w, idmint_next_owned(GREATEST(w.found, w.floor)) o
), bumped AS (
    UPDATE idmint_tags t
    SET max_id = o.last_id, updated_at = now()
    FROM wanted w JOIN owned o USING (biz_tag)
    WHERE t.biz_tag = w.biz_tag AND NOT w.refused AND o.first_id IS NOT NULL
      AND (o.regioned OR GREATEST(t.max_id, w.floor) <= 9223372036854775807 - w.size)
    RETURNING t.biz_tag, o.first_id, o.last_id
), logged AS (
    INSERT INTO idmint_segments (request_id, biz_tag, first_id, last_id, instance, principal, holder_hash)
    SELECT $3, biz_tag, first_id, last_id, $4, $9, $10 FROM bumped
    RETURNING request_id
)
SELECT b.first_id, b.last_id, w.step, COALESCE(w.max_step, 0), w.runway_ms, w.found, w.floor, w.refused, o.regioned
FROM wanted w JOIN owned o USING (biz_tag) LEFT JOIN (bumped b JOIN logged ON true) ON true`

// Allocate implements allocator.Store. Once the grant commits, it waits until the
// standbys the ReplicationConfig requires have its WAL, on the same
// connection; if they do not in time, it returns an error wrapping
// ErrNotReplicated and the segment must not be served.
func (p *Store) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return allocator.Segment{}, fmt.Errorf("allocate: no connection, nothing sent: %w", err)
	}
	defer conn.Release()
	seg, err := p.allocate(ctx, conn, req)
	if err != nil {
		return allocator.Segment{}, err
	}
	if err := p.repl.confirm(ctx, conn); err != nil {
		return allocator.Segment{}, fmt.Errorf("allocate %q [%d, %d]: %w", req.Tag, seg.First, seg.Last, err)
	}
	return seg, nil
}

// allocate runs the allocation statement on conn.
func (p *Store) allocate(ctx context.Context, conn querier, req allocator.Request) (allocator.Segment, error) {
	seg := allocator.Segment{RequestID: req.ID, Tag: req.Tag, Holder: req.Holder}
	principal, hash := sqlstore.HolderArgs(req.Holder)
	var (
		first, last       *int64 // NULL: nothing granted (refused, or exhausted)
		floor, runwayMS   int64
		refused, regioned bool
	)
	err := conn.QueryRow(ctx, allocateSQL, req.Tag, req.Size, req.ID, req.Instance, int64(segment.DefaultMaxStep),
		req.Floor, req.ClaimedFloor, allocator.LeadOf(req), principal, hash).
		Scan(&first, &last, &seg.Step, &seg.MaxStep, &runwayMS, &seg.FoundMaxID, &floor, &refused, &regioned)
	seg.Runway = time.Duration(runwayMS) * time.Millisecond
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return allocator.Segment{}, fmt.Errorf("%w: %q", allocator.ErrUnknownTag, req.Tag)
	case err != nil:
		return allocator.Segment{}, classify("allocate", err)
	case refused:
		return allocator.Segment{}, fmt.Errorf("%w: %q at max_id %d, floor %d claimed", allocator.ErrFloorBudget, req.Tag, seg.FoundMaxID, req.ClaimedFloor)
	case (first == nil || last == nil) && regioned:
		return allocator.Segment{}, fmt.Errorf("%w: %q at max_id %d (floor %d)", allocator.ErrShareExhausted, req.Tag, seg.FoundMaxID, floor)
	case first == nil || last == nil:
		return allocator.Segment{}, fmt.Errorf("%w: %q at max_id %d (floor %d)", allocator.ErrExhausted, req.Tag, seg.FoundMaxID, floor)
	}
	seg.First, seg.Last = *first, *last
	seg.Repaired = seg.FoundMaxID < floor
	seg.Lead = allocator.ClaimedLeadOf(seg.FoundMaxID, floor, req)
	return seg, nil
}

// lookupSQL reads a request's log row: what it kept (a give-back ends it at
// returned_from - 1, before first_id when it gave back all) and its holder.
const lookupSQL = `
SELECT s.biz_tag, s.first_id, COALESCE(s.returned_from - 1, s.last_id), t.step, COALESCE(t.max_step, 0),
       t.runway_ms, s.principal, s.holder_hash
FROM idmint_segments s JOIN idmint_tags t USING (biz_tag)
WHERE s.request_id = $1`

// Lookup implements allocator.Store. A segment found is confirmed on the standbys
// like a new grant (see Allocate) before it is returned.
func (p *Store) Lookup(ctx context.Context, id uuid.UUID) (allocator.Segment, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return allocator.Segment{}, fmt.Errorf("lookup request %s: %w", id, err)
	}
	defer conn.Release()
	seg := allocator.Segment{RequestID: id}
	var (
		principal *string
		hash      []byte
		runwayMS  int64
	)
	err = conn.QueryRow(ctx, lookupSQL, id).Scan(&seg.Tag, &seg.First, &seg.Last, &seg.Step, &seg.MaxStep, &runwayMS, &principal, &hash)
	seg.Runway = time.Duration(runwayMS) * time.Millisecond
	if errors.Is(err, pgx.ErrNoRows) {
		return allocator.Segment{}, allocator.ErrNotFound
	}
	if err != nil {
		return allocator.Segment{}, fmt.Errorf("lookup request %s: %w", id, err)
	}
	if seg.Holder, err = sqlstore.ScanHolder(principal, hash); err != nil {
		return allocator.Segment{}, fmt.Errorf("lookup request %s: %w", id, err)
	}
	if seg.Last < seg.First {
		// Its tag and holder, for the caller to tell who asks.
		return seg, fmt.Errorf("%w: request %s (%q from %d)", allocator.ErrGivenBack, id, seg.Tag, seg.First)
	}
	// The row is visible, so its commit is at or before the WAL written
	// now: confirm it like a new grant.
	if err := p.repl.confirm(ctx, conn); err != nil {
		return allocator.Segment{}, fmt.Errorf("lookup request %s [%d, %d]: %w", id, seg.First, seg.Last, err)
	}
	return seg, nil
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
			return allocator.ErrAlreadyGranted
		case strings.HasPrefix(pgErr.Code, "08"), pgErr.Code == "57P01", pgErr.Code == "57P02",
			pgErr.Code == "57P03", pgErr.Code == "XX000":
			return fmt.Errorf("%s: %w: %w", op, allocator.ErrAmbiguous, err)
		}
		return fmt.Errorf("%s: server refused, nothing committed: %w", op, err)
	}
	if pgconn.SafeToRetry(err) {
		return fmt.Errorf("%s: not sent: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, allocator.ErrAmbiguous, err)
}
