package allocator

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ErrRequestConflict means a caller's request ID was already granted, for
// another tag: request IDs must be unique, whatever the tag.
var ErrRequestConflict = errors.New("request_id already used for another biz_tag")

// RangeReturner is implemented by stores that can take back the unused tail
// of a range granted to a caller's request ID (see Allocator.ReturnRange).
type RangeReturner interface {
	// GiveBackRange lowers the tag's max_id to first-1, but only if
	// [first, last] is the tail of the range granted to request id, max_id
	// is still last, and no other request was ever granted an ID at or
	// above first. It reports whether it did; false is no error.
	GiveBackRange(ctx context.Context, id uuid.UUID, tag string, first, last int64) (bool, error)
}

var (
	_ RangeReturner = (*Postgres)(nil)
	_ RangeReturner = (*SQLite)(nil)
	_ RangeReturner = (*MemStore)(nil)
)

// clientSuffix marks the ranges granted to callers in the segment log's
// instance column: "<instance>/client".
const clientSuffix = "/client"

// GrantRange grants a range of tag straight from the store to a caller that
// holds it in its own buffer (the client package). The caller chose the
// request ID id before its first attempt and reuses it on every retry,
// through any instance: the store grants it once, and a retry gets the same
// range back (recovered is then true).
//
// The range is the caller's alone: the allocator never serves IDs from it,
// and it does not raise the tag's floor here. The request carries that
// floor, so a database that went back in time below the IDs this instance
// was granted is raised to it (and the repair logged) before the caller's
// range is granted above it.
//
// size 0 asks for the tag's step; the store bounds size by step and
// max_step. Errors after which the caller should retry with the same id
// wrap ErrUnavailable.
func (a *Allocator) GrantRange(ctx context.Context, tag string, size int64, id uuid.UUID) (seg Segment, recovered bool, err error) {
	if err := a.checkRange(tag, id); err != nil {
		return Segment{}, false, err
	}
	if size < 0 {
		return Segment{}, false, fmt.Errorf("size %d: must not be negative", size)
	}
	a.mu.RLock()
	floor := a.highest[tag]
	a.mu.RUnlock()
	req := Request{ID: id, Tag: tag, Size: size, Instance: a.cfg.Instance + clientSuffix, Floor: floor}
	seg, err = a.allocate(ctx, req)
	switch {
	case err == nil:
		log := a.cfg.Logger.With("biz_tag", tag, "request_id", id, "first", seg.First, "last", seg.Last)
		if seg.Repaired {
			log.Error("REPAIRED rollback while granting a client range: the tag's max_id was below the highest id this instance was granted (restored backup or failover to a lagging replica?); raised it to that id; bump the tag past the old high-water mark",
				"max_id_found", seg.FoundMaxID, "raised_to", floor)
		}
		log.Info("range granted to a client")
		return seg, false, nil
	case errors.Is(err, ErrUnknownTag), errors.Is(err, ErrInvalidTag):
		return Segment{}, false, err
	case errors.Is(err, ErrAlreadyGranted), errors.Is(err, ErrExhausted):
		// Granted before: find it. "Exhausted" also looks the request
		// up, because a store that refuses the bump never reaches the
		// insert that would have said "granted before".
		found, lerr := a.lookup(ctx, id)
		switch {
		case lerr == nil && found.Tag != tag:
			return Segment{}, false, fmt.Errorf("%w: request %s was granted for %q", ErrRequestConflict, id, found.Tag)
		case lerr == nil:
			a.cfg.Logger.Warn("RECOVERED client range by request id: a retry got the range granted before",
				"biz_tag", tag, "request_id", id, "first", found.First, "last", found.Last)
			return found, true, nil
		case errors.Is(lerr, ErrNotFound) && !errors.Is(err, ErrAlreadyGranted):
			return Segment{}, false, err
		}
		return Segment{}, false, fmt.Errorf("%w: look up request %s: %w", ErrUnavailable, id, lerr)
	}
	// Nothing final: ambiguous or refused by the server. The caller
	// retries with the same request ID.
	return Segment{}, false, fmt.Errorf("%w: grant request %s: %w", ErrUnavailable, id, err)
}

// ReturnRange gives back [first, last], the unused tail of the range granted
// to request id, when the store can take it back safely (see
// RangeReturner): nobody was granted anything at or above first since. It
// reports whether it did; when it did not, the IDs stay a gap. The caller
// must hand out none of them afterwards, and must not retry a give-back
// whose answer it did not get: the first attempt may have succeeded.
func (a *Allocator) ReturnRange(ctx context.Context, id uuid.UUID, tag string, first, last int64) (bool, error) {
	if err := a.checkRange(tag, id); err != nil {
		return false, err
	}
	if first < 1 || first > last {
		return false, fmt.Errorf("give back [%d, %d]: want 1 <= first <= last", first, last)
	}
	r, ok := a.cfg.Store.(RangeReturner)
	if !ok {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.AttemptTimeout)
	defer cancel()
	ok, err := r.GiveBackRange(ctx, id, tag, first, last)
	if err != nil {
		return false, fmt.Errorf("%w: give back request %s [%d, %d]: %w", ErrUnavailable, id, first, last, err)
	}
	a.cfg.Logger.Info("client range given back", "biz_tag", tag, "request_id", id, "first", first, "last", last, "given_back", ok)
	return ok, nil
}

func (a *Allocator) checkRange(tag string, id uuid.UUID) error {
	a.mu.RLock()
	closed := a.closed
	a.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if id == uuid.Nil {
		return errors.New("request_id: must not be the nil UUID")
	}
	return ValidateTag(tag)
}

// giveBackRangeSQL is the compare-and-set of GiveBack, guarded by the
// segment log: [$3, $4] is the tail of request $1's segment, which gave
// nothing back yet, and no other request keeps an ID at or above $3 (a
// row's kept part ends at returned_from - 1, or last_id). The guard makes a
// late, repeated or stranger's give-back harmless: once another request was
// granted IDs of the tail, max_id may end at $4 again, but the log shows
// that request.
const giveBackRangeSQL = `
UPDATE idmint_tags SET max_id = $3 - 1, updated_at = now()
WHERE biz_tag = $2 AND max_id = $4
  AND EXISTS (SELECT 1 FROM idmint_segments
              WHERE request_id = $1 AND biz_tag = $2 AND first_id <= $3 AND last_id = $4
                AND returned_from IS NULL)
  AND NOT EXISTS (SELECT 1 FROM idmint_segments
                  WHERE biz_tag = $2 AND COALESCE(returned_from - 1, last_id) >= $3 AND request_id <> $1)`

// GiveBackRange implements RangeReturner. The tag's row is locked first, so
// that the guarded update reads the segment log after every allocation
// before it committed (under READ COMMITTED each statement sees what
// committed before it began). The request's log row records the give-back
// (returned_from) in the same transaction, as GiveBack does.
func (p *Postgres) GiveBackRange(ctx context.Context, id uuid.UUID, tag string, first, last int64) (bool, error) {
	var n int64
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var maxID int64
		err := tx.QueryRow(ctx, `SELECT max_id FROM idmint_tags WHERE biz_tag = $1 FOR UPDATE`, tag).Scan(&maxID)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && maxID != last) {
			return nil
		}
		if err != nil {
			return err
		}
		res, err := tx.Exec(ctx, giveBackRangeSQL, id, tag, first, last)
		if err != nil || res.RowsAffected() != 1 {
			return err
		}
		n = 1
		_, err = tx.Exec(ctx, `UPDATE idmint_segments SET returned_from = $2 WHERE request_id = $1`, id, first)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("give back %q [%d, %d]: %w", tag, first, last, err)
	}
	return n == 1, nil
}

// GiveBackRange implements RangeReturner in one write transaction.
func (s *SQLite) GiveBackRange(ctx context.Context, id uuid.UUID, tag string, first, last int64) (bool, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
UPDATE idmint_tags SET max_id = ?3 - 1, updated_at = `+nowSQL+`
WHERE biz_tag = ?2 AND max_id = ?4
  AND EXISTS (SELECT 1 FROM idmint_segments
              WHERE request_id = ?1 AND biz_tag = ?2 AND first_id <= ?3 AND last_id = ?4
                AND returned_from IS NULL)
  AND NOT EXISTS (SELECT 1 FROM idmint_segments
                  WHERE biz_tag = ?2 AND COALESCE(returned_from - 1, last_id) >= ?3 AND request_id <> ?1)`,
			id.String(), tag, first, last)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n != 1 {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE idmint_segments SET returned_from = ? WHERE request_id = ?`, first, id.String())
		return err
	})
	if err != nil {
		return false, fmt.Errorf("give back %q [%d, %d]: %w", tag, first, last, err)
	}
	return n == 1, nil
}

// GiveBackRange implements RangeReturner.
func (m *MemStore) GiveBackRange(ctx context.Context, id uuid.UUID, tag string, first, last int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tags[tag]
	own, granted := m.requests[id]
	_, returned := m.returned[id]
	if !ok || !granted || returned || t.MaxID != last || own.Tag != tag || own.First > first || own.Last != last {
		return false, nil
	}
	for rid, seg := range m.requests {
		kept := seg.Last
		if from, ok := m.returned[rid]; ok {
			kept = from - 1
		}
		if rid != id && seg.Tag == tag && kept >= first {
			return false, nil
		}
	}
	t.MaxID = first - 1
	if m.returned == nil {
		m.returned = map[uuid.UUID]int64{}
	}
	m.returned[id] = first
	return true, nil
}
