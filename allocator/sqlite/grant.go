package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/sqlstore"
)

// logSQL records a grant in the segment log; the primary key refuses a
// request ID granted before.
const logSQL = `INSERT INTO idmint_segments (request_id, biz_tag, first_id, last_id, instance, principal, holder_hash) VALUES (?, ?, ?, ?, ?, ?, ?)`

// Allocate implements allocator.Store.
//
// The transaction holds the write lock from its first statement, so nothing
// changes max_id between the read and the update. An error before COMMIT
// rolls everything back; an error from COMMIT itself (an I/O error while
// writing the WAL) leaves the outcome unknown and wraps ErrAmbiguous.
func (s *Store) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	seg := allocator.Segment{RequestID: req.ID, Tag: req.Tag}
	err := s.write(ctx, func(tx *sql.Tx) error {
		var maxID int64
		var runwayMS int64
		err := tx.QueryRowContext(ctx, `SELECT max_id, step, COALESCE(max_step, 0), runway_ms FROM idmint_tags WHERE biz_tag = ?`, req.Tag).
			Scan(&maxID, &seg.Step, &seg.MaxStep, &runwayMS)
		seg.Runway = time.Duration(runwayMS) * time.Millisecond
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %q", allocator.ErrUnknownTag, req.Tag)
		}
		if err != nil {
			return err
		}
		if allocator.FloorRefused(maxID, req) {
			return fmt.Errorf("%w: %q at max_id %d, floor %d claimed", allocator.ErrFloorBudget, req.Tag, maxID, req.ClaimedFloor)
		}
		size := allocator.SizeOf(req.Size, seg.Step, seg.MaxStep)
		// A max_id below the instance's floor (or a caller's, bounded by
		// its lead) went back in time: raise it to the floor, in this
		// transaction, and grant above.
		floor := allocator.FloorOf(maxID, req)
		base := max(maxID, floor)
		// With a region share, the range starts at the next ID it owns and
		// ends at that ID's block's end at the latest (the arithmetic of
		// the postgres store's idmint_next_owned); this transaction holds
		// the write lock, so no fence or claim interleaves.
		share, err := readShare(ctx, tx)
		if err != nil {
			return err
		}
		switch first, end, ok := share.NextOwned(base); {
		case len(share.Epochs) > 0 && !ok:
			return fmt.Errorf("%w: %q at max_id %d", allocator.ErrShareExhausted, req.Tag, base)
		case len(share.Epochs) > 0:
			seg.First, seg.Last = first, end
			if end-first >= size {
				seg.Last = first + (size - 1)
			}
		case base > math.MaxInt64-size:
			return fmt.Errorf("%w: %q at max_id %d", allocator.ErrExhausted, req.Tag, base)
		default:
			seg.First, seg.Last = base+1, base+size
		}
		seg.Repaired, seg.FoundMaxID, seg.Holder = maxID < floor, maxID, req.Holder
		seg.Lead = allocator.ClaimedLeadOf(maxID, floor, req)
		if _, err := tx.ExecContext(ctx, `UPDATE idmint_tags SET max_id = ?, updated_at = `+nowSQL+` WHERE biz_tag = ?`, seg.Last, req.Tag); err != nil {
			return err
		}
		principal, hash := sqlstore.HolderArgs(req.Holder)
		_, err = tx.ExecContext(ctx, logSQL, req.ID.String(), req.Tag, seg.First, seg.Last, req.Instance, principal, hash)
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
			return allocator.ErrAlreadyGranted
		}
		return err
	})
	if err != nil {
		return allocator.Segment{}, fmt.Errorf("allocate %q: %w", req.Tag, err)
	}
	return seg, nil
}

// lookupSQL reads a request's log row: what it kept (a give-back ends it at
// returned_from - 1, before first_id when it gave back all) and its holder.
const lookupSQL = `
SELECT s.biz_tag, s.first_id, COALESCE(s.returned_from - 1, s.last_id), t.step, COALESCE(t.max_step, 0),
       t.runway_ms, s.principal, s.holder_hash
FROM idmint_segments s JOIN idmint_tags t USING (biz_tag)
WHERE s.request_id = ?`

// Lookup implements allocator.Store.
func (s *Store) Lookup(ctx context.Context, id uuid.UUID) (allocator.Segment, error) {
	seg := allocator.Segment{RequestID: id}
	var (
		principal *string
		hash      []byte
		runwayMS  int64
	)
	err := s.db.QueryRowContext(ctx, lookupSQL, id.String()).Scan(&seg.Tag, &seg.First, &seg.Last, &seg.Step, &seg.MaxStep, &runwayMS, &principal, &hash)
	seg.Runway = time.Duration(runwayMS) * time.Millisecond
	if errors.Is(err, sql.ErrNoRows) {
		return allocator.Segment{}, allocator.ErrNotFound
	}
	if err == nil {
		seg.Holder, err = sqlstore.ScanHolder(principal, hash)
	}
	if err != nil {
		return allocator.Segment{}, fmt.Errorf("lookup request %s: %w", id, err)
	}
	if seg.Last < seg.First {
		return seg, fmt.Errorf("%w: request %s (%q from %d)", allocator.ErrGivenBack, id, seg.Tag, seg.First)
	}
	return seg, nil
}
