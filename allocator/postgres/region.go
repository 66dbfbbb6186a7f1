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
		b, err := tagBounds(ctx, tx)
		if err != nil {
			return err
		}
		if err := b.CheckAdded(added); err != nil {
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
		b, err := tagBounds(ctx, tx)
		if err != nil {
			return err
		}
		if err := b.CheckFence(at); err != nil {
			return err
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

// checkBlock refuses a max_step (0: segment.DefaultMaxStep) above the
// share's smallest block (region.BlockFits).
func checkBlock(ctx context.Context, q querier, maxStep int64) error {
	var block int64
	if err := q.QueryRow(ctx, `SELECT COALESCE(min(block), 0) FROM idmint_region_epochs`).Scan(&block); err != nil {
		return fmt.Errorf("read the region blocks: %w", err)
	}
	if maxStep <= 0 {
		maxStep = segment.DefaultMaxStep
	}
	return region.BlockFits(block, maxStep)
}

// tagBounds reads the tags' region.Bounds.
func tagBounds(ctx context.Context, q querier) (region.Bounds, error) {
	var b region.Bounds
	if err := q.QueryRow(ctx, tagBoundsSQL, int64(segment.DefaultMaxStep)).Scan(&b.MaxID, &b.MaxStep); err != nil {
		return region.Bounds{}, fmt.Errorf("read the highest max_id: %w", err)
	}
	return b, nil
}

// HighestMaxID is the highest max_id of the tags (0 without any).
func (p *Store) HighestMaxID(ctx context.Context) (int64, error) {
	b, err := tagBounds(ctx, p.pool)
	return b.MaxID, err
}
