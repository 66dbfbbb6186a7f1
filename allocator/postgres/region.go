package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idmint/idmint/region"
	"github.com/idmint/idmint/segment"
)

// regionLockSQL takes the region lock exclusive for the transaction: every
// grant takes it shared (idmint_next_owned) before it reads the epochs, so
// that once it is held no grant is running on the epochs about to change,
// and the max_id read next is every grant's.
const regionLockSQL = `SELECT pg_advisory_xact_lock(7300528341)`

// tagBoundsSQL is the highest max_id of every tag and the largest max_step
// (the default when unset); 0 and 0 without tags.
const tagBoundsSQL = `SELECT COALESCE(max(max_id), 0), COALESCE(max(COALESCE(max_step, $1::bigint)), 0) FROM idmint_tags`

// Share returns the database's share; the zero Share when it has none (a
// single region).
func (p *Store) Share(ctx context.Context) (region.Share, error) {
	return readShare(ctx, p.pool)
}

func readShare(ctx context.Context, q querier) (region.Share, error) {
	var s region.Share
	err := q.QueryRow(ctx, `SELECT name, worker_slot, worker_slots FROM idmint_region WHERE id = 1`).Scan(&s.Name, &s.WorkerSlot, &s.WorkerSlots)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return region.Share{}, fmt.Errorf("read the region share: %w", err)
	}
	rows, err := q.Query(ctx, `SELECT from_id, COALESCE(to_id, 0), block, regions, region_index FROM idmint_region_epochs ORDER BY from_id`)
	if err != nil {
		return region.Share{}, fmt.Errorf("read the region epochs: %w", err)
	}
	s.Epochs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (region.Epoch, error) {
		var e region.Epoch
		var regions string
		err := row.Scan(&e.From, &e.To, &e.Block, &regions, &e.Index)
		e.Regions = strings.Split(regions, ",")
		return e, err
	})
	if err != nil {
		return region.Share{}, fmt.Errorf("read the region epochs: %w", err)
	}
	return s, nil
}

// WriteShare writes want as the database's share, or extends the share it
// has with want's further epochs (region.Extend), in one transaction under
// the region lock: nothing when it holds want already. It refuses a share
// whose new epochs start at or below a tag's max_id (region.ErrGranted)
// or whose blocks are smaller than a tag's max_step
// (region.ErrBlockBelowStep).
func (p *Store) WriteShare(ctx context.Context, want region.Share) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, regionLockSQL); err != nil {
			return err
		}
		have, err := readShare(ctx, tx)
		if err != nil {
			return err
		}
		added, err := region.Extend(have, want)
		if err != nil || len(added) == 0 {
			return err
		}
		var maxID, maxStep int64
		if err := tx.QueryRow(ctx, tagBoundsSQL, int64(segment.DefaultMaxStep)).Scan(&maxID, &maxStep); err != nil {
			return err
		}
		if err := checkAdded(added, maxID, maxStep); err != nil {
			return err
		}
		if have.IsZero() {
			if _, err := tx.Exec(ctx, `INSERT INTO idmint_region (id, name, worker_slot, worker_slots) VALUES (1, $1, $2, $3)`,
				want.Name, want.WorkerSlot, want.WorkerSlots); err != nil {
				return fmt.Errorf("write the region: %w", err)
			}
		}
		for _, e := range added {
			if _, err := tx.Exec(ctx, `INSERT INTO idmint_region_epochs (from_id, to_id, block, regions, region_count, region_index)
VALUES ($1, NULLIF($2, 0), $3, $4, $5, $6)`, e.From, e.To, e.Block, strings.Join(e.Regions, ","), len(e.Regions), e.Index); err != nil {
				return fmt.Errorf("write epoch %s: %w", e, err)
			}
		}
		return nil
	})
}

// checkAdded refuses epochs that start at or below maxID, the highest
// max_id of the tags, or whose block is below maxStep, their largest
// max_step.
func checkAdded(added []region.Epoch, maxID, maxStep int64) error {
	for _, e := range added {
		if maxID >= e.From {
			return fmt.Errorf("%w: epoch %s starts at or below a tag's max_id %d: start it above (--from, --at)", region.ErrGranted, e, maxID)
		}
		if e.Block < maxStep {
			return fmt.Errorf("%w: epoch %s: a tag's max_step is %d", region.ErrBlockBelowStep, e, maxStep)
		}
	}
	return nil
}

// FenceShare ends the share's open epoch at at (region.Fence; raise moves
// a fence up), under the
// region lock: grants refuse IDs at and above it from then on (until an
// epoch above it is written). It refuses when a tag's max_id is at or
// above at (region.ErrGranted); a share fenced at at already is left as it
// is. It returns the share.
func (p *Store) FenceShare(ctx context.Context, at int64, raise bool) (region.Share, error) {
	var fenced region.Share
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, regionLockSQL); err != nil {
			return err
		}
		have, err := readShare(ctx, tx)
		if err != nil {
			return err
		}
		var changed bool
		if fenced, changed, err = region.Fence(have, at, raise); err != nil || !changed {
			return err
		}
		var maxID, maxStep int64
		if err := tx.QueryRow(ctx, tagBoundsSQL, int64(segment.DefaultMaxStep)).Scan(&maxID, &maxStep); err != nil {
			return err
		}
		if maxID >= at {
			return fmt.Errorf("%w: a tag's max_id %d is at or above the fence %d", region.ErrGranted, maxID, at)
		}
		last := fenced.Epochs[len(fenced.Epochs)-1]
		_, err = tx.Exec(ctx, `UPDATE idmint_region_epochs SET to_id = $2 WHERE from_id = $1`, last.From, at)
		return err
	})
	if err != nil {
		return region.Share{}, fmt.Errorf("fence the share at %d: %w", at, err)
	}
	return fenced, nil
}

// checkBlock refuses a max_step above the share's smallest block
// (region.ErrBlockBelowStep); maxStep 0 is segment.DefaultMaxStep.
func checkBlock(ctx context.Context, q querier, maxStep int64) error {
	var block int64
	if err := q.QueryRow(ctx, `SELECT COALESCE(min(block), 0) FROM idmint_region_epochs`).Scan(&block); err != nil {
		return fmt.Errorf("read the region blocks: %w", err)
	}
	return blockFits(block, maxStep)
}

// blockFits is checkBlock's rule.
func blockFits(block, maxStep int64) error {
	if maxStep <= 0 {
		maxStep = segment.DefaultMaxStep
	}
	if block > 0 && maxStep > block {
		return fmt.Errorf("%w: max_step %d above the region's block %d", region.ErrBlockBelowStep, maxStep, block)
	}
	return nil
}

// HighestMaxID is the highest max_id of the tags (0 without any).
func (p *Store) HighestMaxID(ctx context.Context) (int64, error) {
	var maxID, maxStep int64
	if err := p.pool.QueryRow(ctx, tagBoundsSQL, int64(segment.DefaultMaxStep)).Scan(&maxID, &maxStep); err != nil {
		return 0, fmt.Errorf("read the highest max_id: %w", err)
	}
	return maxID, nil
}
