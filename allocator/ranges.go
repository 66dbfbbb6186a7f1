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
	// GiveBackRange lowers the tag's max_id to first-1, but only if request
	// id is held by h (the same principal and holder key hash; an
	// instance's segment is held by nobody), [first, last] is the tail of
	// the range granted to it, max_id is still last, and no other request
	// was ever granted an ID at or above first; the holder is checked in
	// the same atomic step as the rest. It reports whether it did; false is
	// no error. A request held by another (or by an instance) is
	// ErrNotHolder, and changes nothing.
	GiveBackRange(ctx context.Context, id uuid.UUID, h Holder, tag string, first, last int64) (bool, error)
}

var (
	_ RangeReturner = (*Postgres)(nil)
	_ RangeReturner = (*SQLite)(nil)
	_ RangeReturner = (*MemStore)(nil)
)

// clientSuffix marks the ranges granted to callers in the segment log's
// instance column: "<instance>/client".
const clientSuffix = "/client"

// RangeRequest asks for a caller's range (GrantRange).
type RangeRequest struct {
	// ID is the caller's idempotency key, chosen before its first attempt
	// and reused on every retry, through any instance. It is logged and may
	// be seen by others: it proves nothing by itself.
	ID  uuid.UUID
	Tag string
	// Size is the wanted size; 0 means the tag's step. The store bounds it
	// by step and max_step.
	Size int64
	// Holder is who asks: the caller's principal and the hash of the
	// secret holder key it chose with ID and reuses with it. Required.
	Holder Holder
	// Floor is the highest ID the caller says it was granted for the tag
	// (0: none), untrusted: the store raises max_id to it, bounded (see
	// Request.ClaimedFloor), so that a database that went back in time
	// grants the caller a range it can serve instead of one it refuses.
	Floor int64
}

// GrantRange grants a range of req.Tag straight from the store to a caller
// that holds it in its own buffer (the client package). The store grants
// req.ID once; a retry by the same holder gets the same range back
// (recovered is then true), without the tail it gave back since, and
// ErrGivenBack when it gave back all of it. A retry by anyone else (another
// principal, another holder key, or any caller presenting an instance's own
// request ID) is ErrNotHolder and gets nothing.
//
// The range is the caller's alone: the allocator never serves IDs from it,
// and it does not raise the tag's floor here. The request carries that
// floor, so a database that went back in time below the IDs this instance
// was granted is raised to it (and the repair logged) before the caller's
// range is granted above it.
//
// Errors after which the caller should retry with the same ID wrap
// ErrUnavailable.
func (a *Allocator) GrantRange(ctx context.Context, r RangeRequest) (seg Segment, recovered bool, err error) {
	tag, id := r.Tag, r.ID
	if err := a.checkRange(tag, id); err != nil {
		return Segment{}, false, err
	}
	if r.Size < 0 || r.Floor < 0 {
		return Segment{}, false, fmt.Errorf("size %d, floor %d: must not be negative", r.Size, r.Floor)
	}
	if r.Holder.IsZero() {
		return Segment{}, false, errors.New("a caller's range needs a holder")
	}
	a.mu.RLock()
	floor := a.tags[tag].floorLocked()
	a.mu.RUnlock()
	req := Request{ID: id, Tag: tag, Size: r.Size, Instance: a.cfg.Instance + clientSuffix, Floor: floor,
		ClaimedFloor: r.Floor, Holder: r.Holder}
	seg, err = a.allocate(ctx, req)
	switch {
	case err == nil:
		log := a.cfg.Logger.With("biz_tag", tag, "request_id", id, "first", seg.First, "last", seg.Last)
		if seg.Repaired {
			log.Error("REPAIRED rollback while granting a client range: the tag's max_id was below the highest id this instance or the client was granted (restored backup or failover to a lagging replica?); raised it; bump the tag past the old high-water mark",
				"max_id_found", seg.FoundMaxID, "instance_floor", floor, "client_floor", r.Floor)
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
		case (lerr == nil || errors.Is(lerr, ErrGivenBack)) && !found.Holder.Matches(r.Holder):
			// The request ID is known to whoever read a log line or a
			// header: only its holder may have its range.
			a.cfg.Logger.Warn("REFUSED a grant retry: the request id belongs to another caller",
				"biz_tag", tag, "request_id", id, "caller", r.Holder.Principal)
			return Segment{}, false, fmt.Errorf("%w: request %s", ErrNotHolder, id)
		case (lerr == nil || errors.Is(lerr, ErrGivenBack)) && found.Tag != tag:
			return Segment{}, false, fmt.Errorf("%w: request %s was granted for %q", ErrRequestConflict, id, found.Tag)
		case errors.Is(lerr, ErrGivenBack):
			return Segment{}, false, fmt.Errorf("request %s: %w", id, lerr)
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
// to request id, when h holds it and the store can take it back safely (see
// RangeReturner): nobody was granted anything at or above first since. It
// reports whether it did; when it did not, the IDs stay a gap. A request
// held by another caller, or an instance's own, is ErrNotHolder. The caller
// must hand out none of the IDs afterwards, and must not retry a give-back
// whose answer it did not get: the first attempt may have succeeded.
func (a *Allocator) ReturnRange(ctx context.Context, id uuid.UUID, h Holder, tag string, first, last int64) (bool, error) {
	if err := a.checkRange(tag, id); err != nil {
		return false, err
	}
	if first < 1 || first > last {
		return false, fmt.Errorf("give back [%d, %d]: want 1 <= first <= last", first, last)
	}
	if h.IsZero() {
		return false, fmt.Errorf("%w: request %s: no holder presented", ErrNotHolder, id)
	}
	r, ok := a.cfg.Store.(RangeReturner)
	if !ok {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.attemptTimeout())
	defer cancel()
	ok, err := r.GiveBackRange(ctx, id, h, tag, first, last)
	if errors.Is(err, ErrNotHolder) {
		a.cfg.Logger.Warn("REFUSED a give-back: the request id belongs to another caller",
			"biz_tag", tag, "request_id", id, "first", first, "last", last, "caller", h.Principal)
		return false, err
	}
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
// nothing back yet and is held by principal $5 with holder key hash $6 (an
// instance's segment has neither, and matches no caller), and no other
// request keeps an ID at or above $3 (a row's kept part ends at
// returned_from - 1, or last_id). The guard makes a late, repeated or
// stranger's give-back harmless: once another request was granted IDs of
// the tail, max_id may end at $4 again, but the log shows that request.
const giveBackRangeSQL = `
UPDATE idmint_tags SET max_id = $3 - 1, updated_at = now()
WHERE biz_tag = $2 AND max_id = $4
  AND EXISTS (SELECT 1 FROM idmint_segments
              WHERE request_id = $1 AND biz_tag = $2 AND first_id <= $3 AND last_id = $4
                AND returned_from IS NULL
                AND principal = $5
                AND holder_hash = $6)
  AND NOT EXISTS (SELECT 1 FROM idmint_segments
                  WHERE biz_tag = $2 AND COALESCE(returned_from - 1, last_id) >= $3 AND request_id <> $1)`

// holderOfSQL reads a request's holder, to tell a give-back refused for
// its holder from one refused for the state of the tag.
const holderOfSQL = `SELECT principal, holder_hash FROM idmint_segments WHERE request_id = $1`

// GiveBackRange implements RangeReturner. The tag's row is locked first, so
// that the guarded update reads the segment log after every allocation
// before it committed (under READ COMMITTED each statement sees what
// committed before it began). The request's log row records the give-back
// (returned_from) in the same transaction, as GiveBack does.
func (p *Postgres) GiveBackRange(ctx context.Context, id uuid.UUID, h Holder, tag string, first, last int64) (bool, error) {
	var n int64
	principal, hash := holderArgs(h)
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var maxID int64
		err := tx.QueryRow(ctx, `SELECT max_id FROM idmint_tags WHERE biz_tag = $1 FOR UPDATE`, tag).Scan(&maxID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		case err != nil:
			return err
		case maxID == last:
			res, err := tx.Exec(ctx, giveBackRangeSQL, id, tag, first, last, principal, hash)
			if err != nil {
				return err
			}
			if res.RowsAffected() == 1 {
				n = 1
				_, err = tx.Exec(ctx, `UPDATE idmint_segments SET returned_from = $2 WHERE request_id = $1`, id, first)
				return err
			}
		}
		return refuseStranger(tx.QueryRow(ctx, holderOfSQL, id), pgx.ErrNoRows, id, h)
	})
	return givenBack(n, err, tag, first, last)
}

// GiveBackRange implements RangeReturner in one write transaction.
func (s *SQLite) GiveBackRange(ctx context.Context, id uuid.UUID, h Holder, tag string, first, last int64) (bool, error) {
	var n int64
	principal, hash := holderArgs(h)
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
UPDATE idmint_tags SET max_id = ?3 - 1, updated_at = `+nowSQL+`
WHERE biz_tag = ?2 AND max_id = ?4
  AND EXISTS (SELECT 1 FROM idmint_segments
              WHERE request_id = ?1 AND biz_tag = ?2 AND first_id <= ?3 AND last_id = ?4
                AND returned_from IS NULL
                AND principal = ?5
                AND holder_hash = ?6)
  AND NOT EXISTS (SELECT 1 FROM idmint_segments
                  WHERE biz_tag = ?2 AND COALESCE(returned_from - 1, last_id) >= ?3 AND request_id <> ?1)`,
			id.String(), tag, first, last, principal, hash)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		if n == 1 {
			_, err = tx.ExecContext(ctx, `UPDATE idmint_segments SET returned_from = ? WHERE request_id = ?`, first, id.String())
			return err
		}
		return refuseStranger(tx.QueryRowContext(ctx, `SELECT principal, holder_hash FROM idmint_segments WHERE request_id = ?`, id.String()),
			sql.ErrNoRows, id, h)
	})
	return givenBack(n, err, tag, first, last)
}

// GiveBackRange implements RangeReturner.
func (m *MemStore) GiveBackRange(ctx context.Context, id uuid.UUID, h Holder, tag string, first, last int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tags[tag]
	own, granted := m.requests[id]
	if granted && !own.Holder.Matches(h) {
		return false, fmt.Errorf("%w: request %s", ErrNotHolder, id)
	}
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

// holderArgs returns h as the segment log stores it: NULL and NULL for an
// instance's own segment.
func holderArgs(h Holder) (principal, hash any) {
	if h.IsZero() {
		return nil, nil
	}
	return h.Principal, h.KeyHash[:]
}

// scanHolder reads a Holder from the segment log's columns.
func scanHolder(principal *string, hash []byte) (Holder, error) {
	switch {
	case principal == nil && hash == nil:
		return Holder{}, nil
	case principal == nil || len(hash) != len(Holder{}.KeyHash):
		return Holder{}, errors.New("segment log row with a partial holder")
	}
	h := Holder{Principal: *principal}
	copy(h.KeyHash[:], hash)
	return h, nil
}

// refuseStranger reads a request's holder from row (principal,
// holder_hash) and returns ErrNotHolder unless it is h. A request without a
// row (noRows) is nobody's: nil.
func refuseStranger(row rowScanner, noRows error, id uuid.UUID, h Holder) error {
	var (
		owner   *string
		ownHash []byte
	)
	err := row.Scan(&owner, &ownHash)
	if errors.Is(err, noRows) {
		return nil
	}
	if err != nil {
		return err
	}
	own, err := scanHolder(owner, ownHash)
	if err != nil {
		return err
	}
	if !own.Matches(h) {
		return fmt.Errorf("%w: request %s", ErrNotHolder, id)
	}
	return nil
}

// givenBack is the answer of a GiveBackRange transaction that changed n
// tags and ended with err.
func givenBack(n int64, err error, tag string, first, last int64) (bool, error) {
	if errors.Is(err, ErrNotHolder) {
		return false, err
	}
	if err != nil {
		return false, fmt.Errorf("give back %q [%d, %d]: %w", tag, first, last, err)
	}
	return n == 1, nil
}
