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
		var maxID, maxStep int64
		if err := tx.QueryRowContext(ctx, tagBoundsSQL, int64(segment.DefaultMaxStep)).Scan(&maxID, &maxStep); err != nil {
			return err
		}
		for _, e := range added {
			if maxID >= e.From {
				return fmt.Errorf("%w: epoch %s starts at or below a tag's max_id %d: start it above (--from, --at)", region.ErrGranted, e, maxID)
			}
			if e.Block < maxStep {
				return fmt.Errorf("%w: epoch %s: a tag's max_step is %d", region.ErrBlockBelowStep, e, maxStep)
			}
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
		var maxID, maxStep int64
		if err := tx.QueryRowContext(ctx, tagBoundsSQL, int64(segment.DefaultMaxStep)).Scan(&maxID, &maxStep); err != nil {
			return err
		}
		if maxID >= at {
			return fmt.Errorf("%w: a tag's max_id %d is at or above the fence %d", region.ErrGranted, maxID, at)
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
// share's smallest block, with ErrInvalidSpec.
func checkBlock(ctx context.Context, q queryer, maxStep int64) error {
	var block int64
	if err := q.QueryRowContext(ctx, `SELECT COALESCE(min(block), 0) FROM idmint_region_epochs`).Scan(&block); err != nil {
		return fmt.Errorf("read the region blocks: %w", err)
	}
	if maxStep <= 0 {
		maxStep = segment.DefaultMaxStep
	}
	if block > 0 && maxStep > block {
		return fmt.Errorf("%w: %w: max_step %d above the region's block %d", allocator.ErrInvalidSpec, region.ErrBlockBelowStep, maxStep, block)
	}
	return nil
}

// HighestMaxID is the highest max_id of the tags (0 without any).
func (s *Store) HighestMaxID(ctx context.Context) (int64, error) {
	var maxID, maxStep int64
	if err := s.db.QueryRowContext(ctx, tagBoundsSQL, int64(segment.DefaultMaxStep)).Scan(&maxID, &maxStep); err != nil {
		return 0, fmt.Errorf("read the highest max_id: %w", err)
	}
	return maxID, nil
}
