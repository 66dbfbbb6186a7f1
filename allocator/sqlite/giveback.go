package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/sqlstore"
)

// giveBackRangeSQL is the compare-and-set of GiveBackRange, with the
// postgres store's guard (see its giveBackRangeSQL): ?1 the request, ?2
// the tag, [?3, ?4] the tail, ?5 and ?6 its holder. It runs under SQLite's
// one write lock, so the guard is written, as there, as two bounds on what
// a row keeps, COALESCE(returned_from - 1, last_id), the expression of the
// index idmint_segments_kept: it reads the index range from ?3 up, only
// rows that keep something there.
const giveBackRangeSQL = `
UPDATE idmint_tags SET max_id = ?3 - 1, updated_at = ` + nowSQL + `
WHERE biz_tag = ?2 AND max_id = ?4
  AND EXISTS (SELECT 1 FROM idmint_segments
              WHERE request_id = ?1 AND biz_tag = ?2 AND first_id <= ?3 AND last_id = ?4
                AND returned_from IS NULL
                AND principal = ?5
                AND holder_hash = ?6)
  AND NOT EXISTS (SELECT 1 FROM idmint_segments
                  WHERE biz_tag = ?2 AND COALESCE(returned_from - 1, last_id) >= ?3
                    AND COALESCE(returned_from - 1, last_id) >= first_id AND request_id <> ?1)`

// returnedFromSQL records a caller's give-back in its request's log row.
const returnedFromSQL = `UPDATE idmint_segments SET returned_from = ? WHERE request_id = ?`

// holderOfSQL reads a request's holder, to tell a give-back refused for
// its holder from one refused for the state of the tag.
const holderOfSQL = `SELECT principal, holder_hash FROM idmint_segments WHERE request_id = ?`

// GiveBackRange implements allocator.Granter in one write transaction.
func (s *Store) GiveBackRange(ctx context.Context, id uuid.UUID, h allocator.Holder, tag string, first, last int64) (bool, error) {
	var n int64
	principal, hash := sqlstore.HolderArgs(h)
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, giveBackRangeSQL, id.String(), tag, first, last, principal, hash)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		if n == 1 {
			_, err = tx.ExecContext(ctx, returnedFromSQL, first, id.String())
			return err
		}
		return sqlstore.RefuseStranger(tx.QueryRowContext(ctx, holderOfSQL, id.String()), sql.ErrNoRows, id, h)
	})
	return sqlstore.GivenBack(n, err, tag, first, last)
}

// giveBackSQL lowers max_id to first-1 only if it is still last: ?1 the
// tag, [?2, ?3] the range.
const giveBackSQL = `UPDATE idmint_tags SET max_id = ?2 - 1, updated_at = ` + nowSQL + ` WHERE biz_tag = ?1 AND max_id = ?3`

// markReturnedSQL marks, after giveBackSQL and as the postgres store does,
// the log rows whose kept part reaches into [?2, ?3] (tag ?1): they keep
// only what lies below ?2. They keep an ID at or above ?2: the range of
// the index idmint_segments_kept, not the tag's whole log.
const markReturnedSQL = `UPDATE idmint_segments SET returned_from = MAX(first_id, ?2)
WHERE biz_tag = ?1 AND COALESCE(returned_from - 1, last_id) >= ?2 AND first_id <= ?3`

// GiveBack implements allocator.Granter with one compare-and-set statement, and
// records the give-back in the segment log in the same transaction.
func (s *Store) GiveBack(ctx context.Context, tag string, first, last int64) (bool, error) {
	if first < 1 || first > last {
		return false, fmt.Errorf("give back %q: invalid range [%d, %d]", tag, first, last)
	}
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, giveBackSQL, tag, first, last)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n != 1 {
			return err
		}
		_, err = tx.ExecContext(ctx, markReturnedSQL, tag, first, last)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("give back %q [%d, %d]: %w", tag, first, last, err)
	}
	return n == 1, nil
}
