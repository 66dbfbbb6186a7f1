package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/region"
	"github.com/idmint/idmint/segment"
)

// queryer is a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// tagBoundsSQL is the highest max_id of every tag and the largest max_step
// (the default when unset); 0 and 0 without tags.
const tagBoundsSQL = `SELECT COALESCE(max(max_id), 0), COALESCE(max(COALESCE(max_step, ?)), 0) FROM idmint_tags`

// Share returns the database's share; the zero Share when it has none (a
// single region).
func (s *Store) Share(ctx context.Context) (region.Share, error) { return readShare(ctx, s.db) }

func readShare(ctx context.Context, q queryer) (region.Share, error) {
	var sh region.Share
	err := q.QueryRowContext(ctx, `SELECT name, worker_slot, worker_slots FROM idmint_region WHERE id = 1`).Scan(&sh.Name, &sh.WorkerSlot, &sh.WorkerSlots)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return region.Share{}, fmt.Errorf("read the region share: %w", err)
	}
	rows, err := q.QueryContext(ctx, `SELECT from_id, COALESCE(to_id, 0), block, regions, region_index FROM idmint_region_epochs ORDER BY from_id`)
	if err != nil {
		return region.Share{}, fmt.Errorf("read the region epochs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e region.Epoch
		var regions string
		if err := rows.Scan(&e.From, &e.To, &e.Block, &regions, &e.Index); err != nil {
			return region.Share{}, fmt.Errorf("read the region epochs: %w", err)
		}
		e.Regions = strings.Split(regions, ",")
		sh.Epochs = append(sh.Epochs, e)
	}
	if err := rows.Err(); err != nil {
		return region.Share{}, fmt.Errorf("read the region epochs: %w", err)
	}
	return sh, nil
}

// WriteShare writes want as the database's share, or extends the one it
// has (region.Extend), in one write transaction: see the postgres store's.
func (s *Store) WriteShare(ctx context.Context, want region.Share) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		have, err := readShare(ctx, tx)
		if err != nil {
			return err
		}
		added, err := region.Extend(have, want)
		if err != nil || len(added) == 0 {
			return err
		}
		b, err := tagBounds(ctx, tx)
		if err != nil {
			return err
		}
		if err := b.CheckAdded(added); err != nil {
			return err
		}
		if have.IsZero() {
			if _, err := tx.ExecContext(ctx, `INSERT INTO idmint_region (id, name, worker_slot, worker_slots) VALUES (1, ?, ?, ?)`,
				want.Name, want.WorkerSlot, want.WorkerSlots); err != nil {
				return fmt.Errorf("write the region: %w", err)
			}
		}
		for _, e := range added {
			if _, err := tx.ExecContext(ctx, `INSERT INTO idmint_region_epochs (from_id, to_id, block, regions, region_count, region_index)
VALUES (?, NULLIF(?, 0), ?, ?, ?, ?)`, e.From, e.To, e.Block, strings.Join(e.Regions, ","), len(e.Regions), e.Index); err != nil {
				return fmt.Errorf("write epoch %s: %w", e, err)
			}
		}
		return nil
	})
}

// FenceShare ends the share's open epoch at at, in one write transaction:
// see the postgres store's.
func (s *Store) FenceShare(ctx context.Context, at int64, raise bool) (region.Share, error) {
	var fenced region.Share
	err := s.write(ctx, func(tx *sql.Tx) error {
		have, err := readShare(ctx, tx)
		if err != nil {
			return err
		}
		var changed bool
		if fenced, changed, err = region.Fence(have, at, raise); err != nil || !changed {
			return err
		}
		b, err := tagBounds(ctx, tx)
		if err != nil {
			return err
		}
		if err := b.CheckFence(at); err != nil {
			return err
		}
		last := fenced.Epochs[len(fenced.Epochs)-1]
		_, err = tx.ExecContext(ctx, `UPDATE idmint_region_epochs SET to_id = ? WHERE from_id = ?`, at, last.From)
		return err
	})
	if err != nil {
		return region.Share{}, fmt.Errorf("fence the share at %d: %w", at, err)
	}
	return fenced, nil
}

// checkBlock refuses a max_step (0: segment.DefaultMaxStep) above the
// share's smallest block (region.BlockFits), with ErrInvalidSpec.
func checkBlock(ctx context.Context, q queryer, maxStep int64) error {
	var block int64
	if err := q.QueryRowContext(ctx, `SELECT COALESCE(min(block), 0) FROM idmint_region_epochs`).Scan(&block); err != nil {
		return fmt.Errorf("read the region blocks: %w", err)
	}
	if maxStep <= 0 {
		maxStep = segment.DefaultMaxStep
	}
	if err := region.BlockFits(block, maxStep); err != nil {
		return fmt.Errorf("%w: %w", allocator.ErrInvalidSpec, err)
	}
	return nil
}

// tagBounds reads the tags' region.Bounds.
func tagBounds(ctx context.Context, q queryer) (region.Bounds, error) {
	var b region.Bounds
	if err := q.QueryRowContext(ctx, tagBoundsSQL, int64(segment.DefaultMaxStep)).Scan(&b.MaxID, &b.MaxStep); err != nil {
		return region.Bounds{}, fmt.Errorf("read the highest max_id: %w", err)
	}
	return b, nil
}

// HighestMaxID is the highest max_id of the tags (0 without any).
func (s *Store) HighestMaxID(ctx context.Context) (int64, error) {
	b, err := tagBounds(ctx, s.db)
	return b.MaxID, err
}
