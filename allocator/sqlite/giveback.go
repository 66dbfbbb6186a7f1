package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/sqlstore"
)

// GiveBackRange implements allocator.Granter in one write transaction.
func (s *Store) GiveBackRange(ctx context.Context, id uuid.UUID, h allocator.Holder, tag string, first, last int64) (bool, error) {
	var n int64
	principal, hash := sqlstore.HolderArgs(h)
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
                  WHERE biz_tag = ?2 AND COALESCE(returned_from - 1, last_id) >= MAX(?3, first_id) AND request_id <> ?1)`,
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
		return sqlstore.RefuseStranger(tx.QueryRowContext(ctx, `SELECT principal, holder_hash FROM idmint_segments WHERE request_id = ?`, id.String()),
			sql.ErrNoRows, id, h)
	})
	return sqlstore.GivenBack(n, err, tag, first, last)
}

// GiveBack implements allocator.Granter with one compare-and-set statement, and
// records the give-back in the segment log in the same transaction.
func (s *Store) GiveBack(ctx context.Context, tag string, first, last int64) (bool, error) {
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
		// As in the postgres store: the log rows of the IDs given back keep only
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
