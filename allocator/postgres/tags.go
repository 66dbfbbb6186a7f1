package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/sqlstore"
)

// CreateTag implements allocator.Admin.
func (p *Store) CreateTag(ctx context.Context, spec allocator.TagSpec) (allocator.Tag, error) {
	spec, err := spec.WithDefaults()
	if err != nil {
		return allocator.Tag{}, err
	}
	if err := checkBlock(ctx, p.pool, spec.MaxStep); err != nil {
		return allocator.Tag{}, fmt.Errorf("%w: %w", allocator.ErrInvalidSpec, err)
	}
	t, err := sqlstore.ScanTag(p.pool.QueryRow(ctx, `
INSERT INTO idmint_tags (biz_tag, max_id, step, max_step, description, runway_ms)
VALUES ($1, $2, $3, NULLIF($4, 0), $5, $6)
RETURNING `+sqlstore.TagColumns, spec.Name, spec.Start-1, spec.Step, spec.MaxStep, spec.Description, spec.Runway.Milliseconds()))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return allocator.Tag{}, fmt.Errorf("%w: %q", allocator.ErrExists, spec.Name)
	}
	return t, err
}

// Tags implements allocator.Admin.
func (p *Store) Tags(ctx context.Context) ([]allocator.Tag, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+sqlstore.TagColumns+` FROM idmint_tags ORDER BY biz_tag`)
	if err != nil {
		return nil, fmt.Errorf("list tags: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (allocator.Tag, error) { return sqlstore.ScanTag(row) })
}

// SetStep implements allocator.Admin.
func (p *Store) SetStep(ctx context.Context, name string, step, maxStep int64) (allocator.Tag, error) {
	if err := allocator.CheckSteps(step, maxStep); err != nil {
		return allocator.Tag{}, err
	}
	if err := checkBlock(ctx, p.pool, maxStep); err != nil {
		return allocator.Tag{}, fmt.Errorf("%w: %w", allocator.ErrInvalidSpec, err)
	}
	return p.updateTag(ctx, name, `step = $2, max_step = NULLIF($3, 0)`, step, maxStep)
}

// SetRunway implements allocator.Admin.
func (p *Store) SetRunway(ctx context.Context, name string, runway time.Duration) (allocator.Tag, error) {
	if err := allocator.CheckRunway(runway); err != nil {
		return allocator.Tag{}, err
	}
	return p.updateTag(ctx, name, `runway_ms = $2`, runway.Milliseconds())
}

// Bump implements allocator.Admin. One statement raises max_id, and only if that
// raises it; otherwise the tag is read to say why nothing changed.
func (p *Store) Bump(ctx context.Context, name string, to, by int64) (allocator.Tag, error) {
	if err := allocator.CheckBump(to, by); err != nil {
		return allocator.Tag{}, err
	}
	t, err := sqlstore.ScanTag(p.pool.QueryRow(ctx, `
UPDATE idmint_tags
SET max_id = CASE WHEN $2::bigint > 0 THEN $2::bigint ELSE max_id + $3::bigint END, updated_at = now()
WHERE biz_tag = $1
  AND (($2::bigint > 0 AND max_id < $2::bigint AND $2::bigint <= 9223372036854775807 - step)
    OR ($2::bigint = 0 AND max_id <= 9223372036854775807 - step - $3::bigint))
RETURNING `+sqlstore.TagColumns, name, to, by))
	if !errors.Is(err, pgx.ErrNoRows) {
		return t, err
	}
	cur, err := sqlstore.ScanTag(p.pool.QueryRow(ctx, `SELECT `+sqlstore.TagColumns+` FROM idmint_tags WHERE biz_tag = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return allocator.Tag{}, fmt.Errorf("%w: %q", allocator.ErrUnknownTag, name)
	}
	if err != nil {
		return allocator.Tag{}, err
	}
	_, err = allocator.Bumped(cur, to, by)
	return cur, err
}

func (p *Store) updateTag(ctx context.Context, name, set string, args ...any) (allocator.Tag, error) {
	t, err := sqlstore.ScanTag(p.pool.QueryRow(ctx,
		`UPDATE idmint_tags SET `+set+`, updated_at = now() WHERE biz_tag = $1 RETURNING `+sqlstore.TagColumns,
		append([]any{name}, args...)...))
	if errors.Is(err, pgx.ErrNoRows) {
		return allocator.Tag{}, fmt.Errorf("%w: %q", allocator.ErrUnknownTag, name)
	}
	return t, err
}

// Describe implements allocator.Admin.
func (p *Store) Describe(ctx context.Context, name, description string) (allocator.Tag, error) {
	if err := allocator.CheckDescription(description); err != nil {
		return allocator.Tag{}, err
	}
	return p.updateTag(ctx, name, `description = $2`, description)
}
