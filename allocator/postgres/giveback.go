package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/sqlstore"
)

// giveBackRangeSQL is the compare-and-set of GiveBack, guarded by the
// segment log: [$3, $4] is the tail of request $1's segment, which gave
// nothing back yet and is held by principal $5 with holder key hash $6 (an
// instance's segment has neither, and matches no caller), and no other
// request keeps an ID at or above $3 (a row keeps [first_id,
// returned_from - 1], or up to last_id; a row given back in full keeps
// nothing, so the tail that touches it goes back after it). The guard makes a late, repeated or
// stranger's give-back harmless: once another request was granted IDs of
// the tail, max_id may end at $4 again, but the log shows that request.
//
// The guard runs under the tag's row lock, so it must not read the whole
// log: "keeps an ID at or above GREATEST($3, first_id)" is written as two
// bounds on what the row keeps, COALESCE(returned_from - 1, last_id), the
// expression of the index idmint_segments_kept, so that it reads the
// index range from $3 up and only rows that keep something there. A bound
// on last_id alone would also read every row that ever ended above $3 and
// was given back, and a caller who grants and gives back the same range
// over and over adds one such row each time.
const giveBackRangeSQL = `
UPDATE idmint_tags SET max_id = $3 - 1, updated_at = now()
WHERE biz_tag = $2 AND max_id = $4
  AND EXISTS (SELECT 1 FROM idmint_segments
              WHERE request_id = $1 AND biz_tag = $2 AND first_id <= $3 AND last_id = $4
                AND returned_from IS NULL
                AND principal = $5
                AND holder_hash = $6)
  AND NOT EXISTS (SELECT 1 FROM idmint_segments
                  WHERE biz_tag = $2 AND COALESCE(returned_from - 1, last_id) >= $3
                    AND COALESCE(returned_from - 1, last_id) >= first_id AND request_id <> $1)`

// lockTagSQL takes the tag's row lock for a give-back, and has the rest
// of the transaction planned for its parameters (force_custom_plan): a
// generic plan of giveBackRangeSQL, which pgx's prepared statements get
// after five runs, cannot know that $3 lies at the top of the tag's range,
// and costs its NOT EXISTS as stopping at the first of a third of the rows
// of the tag (the planner's default for last_id >= $3): a scan of the
// whole log, where the real answer reads a row or two of the index.
const lockTagSQL = `
WITH custom AS (
    SELECT set_config('plan_cache_mode', 'force_custom_plan', true) AS plan_cache_mode
)
SELECT t.max_id FROM idmint_tags t, custom WHERE t.biz_tag = $1 FOR UPDATE OF t`

// returnedFromSQL records a caller's give-back in its request's log row.
const returnedFromSQL = `UPDATE idmint_segments SET returned_from = $2 WHERE request_id = $1`

// holderOfSQL reads a request's holder, to tell a give-back refused for
// its holder from one refused for the state of the tag.
const holderOfSQL = `SELECT principal, holder_hash FROM idmint_segments WHERE request_id = $1`

// GiveBackRange implements allocator.Granter. The tag's row is locked first, so
// that the guarded update reads the segment log after every allocation
// before it committed (under READ COMMITTED each statement sees what
// committed before it began). The request's log row records the give-back
// (returned_from) in the same transaction, as GiveBack does.
func (p *Store) GiveBackRange(ctx context.Context, id uuid.UUID, h allocator.Holder, tag string, first, last int64) (bool, error) {
	var n int64
	principal, hash := sqlstore.HolderArgs(h)
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var maxID int64
		err := tx.QueryRow(ctx, lockTagSQL, tag).Scan(&maxID)
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
				_, err = tx.Exec(ctx, returnedFromSQL, id, first)
				return err
			}
		}
		return sqlstore.RefuseStranger(tx.QueryRow(ctx, holderOfSQL, id), pgx.ErrNoRows, id, h)
	})
	return sqlstore.GivenBack(n, err, tag, first, last)
}

// giveBackSQL lowers max_id to first-1 ($2 - 1) only if it is still last
// ($3), and in the same statement marks the log rows of the IDs given back
// (returned_from), so that the log alone explains every ID: the rows whose
// kept part reaches into [first, last] keep only what lies below first.
// They keep an ID at or above first: the range of the index
// idmint_segments_kept from first up, not the tag's whole log, nor the
// rows given back there before. back yields at most the one tag row, so
// the marking runs only when the compare-and-set did.
const giveBackSQL = `
WITH back AS (
    UPDATE idmint_tags SET max_id = $2 - 1, updated_at = now()
    WHERE biz_tag = $1 AND max_id = $3
    RETURNING biz_tag
), marked AS (
    UPDATE idmint_segments s SET returned_from = GREATEST(s.first_id, $2)
    FROM back
    WHERE s.biz_tag = $1 AND COALESCE(s.returned_from - 1, s.last_id) >= $2
      AND s.first_id <= $3
    RETURNING s.request_id
)
SELECT count(*) FROM back`

// GiveBack implements allocator.Granter with one compare-and-set statement.
func (p *Store) GiveBack(ctx context.Context, tag string, first, last int64) (bool, error) {
	if first < 1 || first > last {
		return false, fmt.Errorf("give back %q: invalid range [%d, %d]", tag, first, last)
	}
	var n int64
	if err := p.pool.QueryRow(ctx, giveBackSQL, tag, first, last).Scan(&n); err != nil {
		return false, fmt.Errorf("give back %q [%d, %d]: %w", tag, first, last, err)
	}
	return n == 1, nil
}
