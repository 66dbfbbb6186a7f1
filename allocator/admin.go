package allocator

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TagSpec describes a tag to create.
type TagSpec struct {
	Name        string
	Step        int64 // minimum segment size (default 1000)
	MaxStep     int64 // maximum segment size; 0 leaves it unset (1,000,000)
	Start       int64 // first ID to hand out (default 1)
	Description string
}

// CreateTag adds a tag. It returns ErrExists if the tag exists.
func (p *Postgres) CreateTag(ctx context.Context, spec TagSpec) (Tag, error) {
	if err := ValidateTag(spec.Name); err != nil {
		return Tag{}, err
	}
	if spec.Step == 0 {
		spec.Step = 1000
	}
	if spec.Start == 0 {
		spec.Start = 1
	}
	if err := checkSteps(spec.Step, spec.MaxStep); err != nil {
		return Tag{}, err
	}
	if spec.Start < 1 {
		return Tag{}, fmt.Errorf("start %d: must be at least 1", spec.Start)
	}
	t, err := p.scanTag(p.pool.QueryRow(ctx, `
INSERT INTO idmint_tags (biz_tag, max_id, step, max_step, description)
VALUES ($1, $2, $3, NULLIF($4, 0), $5)
RETURNING `+tagColumns, spec.Name, spec.Start-1, spec.Step, spec.MaxStep, spec.Description))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return Tag{}, fmt.Errorf("%w: %q", ErrExists, spec.Name)
	}
	return t, err
}

// Tags returns every tag, sorted by name.
func (p *Postgres) Tags(ctx context.Context) ([]Tag, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+tagColumns+` FROM idmint_tags ORDER BY biz_tag`)
	if err != nil {
		return nil, fmt.Errorf("list tags: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Tag, error) { return p.scanTag(row) })
}

// SetStep changes a tag's minimum and maximum segment size (maxStep 0
// unsets the maximum). Instances apply it from their next segment load.
func (p *Postgres) SetStep(ctx context.Context, name string, step, maxStep int64) (Tag, error) {
	if err := checkSteps(step, maxStep); err != nil {
		return Tag{}, err
	}
	return p.updateTag(ctx, name, `step = $2, max_step = NULLIF($3, 0)`, step, maxStep)
}

// Bump raises a tag's max_id to at least to, or by by: the operator's way out
// after the database went back in time (restored backup, lagging replica).
// It never lowers max_id.
func (p *Postgres) Bump(ctx context.Context, name string, to, by int64) (Tag, error) {
	if to < 0 || by < 0 || (to == 0) == (by == 0) {
		return Tag{}, errors.New("bump: give exactly one of --to N or --by N, positive")
	}
	return p.updateTag(ctx, name,
		`max_id = GREATEST(max_id, CASE WHEN $2::bigint > 0 THEN $2::bigint ELSE max_id + $3::bigint END)`, to, by)
}

func (p *Postgres) updateTag(ctx context.Context, name, set string, args ...any) (Tag, error) {
	t, err := p.scanTag(p.pool.QueryRow(ctx,
		`UPDATE idmint_tags SET `+set+`, updated_at = now() WHERE biz_tag = $1 RETURNING `+tagColumns,
		append([]any{name}, args...)...))
	if errors.Is(err, pgx.ErrNoRows) {
		return Tag{}, fmt.Errorf("%w: %q", ErrUnknownTag, name)
	}
	return t, err
}

const tagColumns = `biz_tag, max_id, step, COALESCE(max_step, 0), description`

func (p *Postgres) scanTag(row pgx.Row) (Tag, error) {
	var t Tag
	if err := row.Scan(&t.Name, &t.MaxID, &t.Step, &t.MaxStep, &t.Description); err != nil {
		return Tag{}, err
	}
	return t, nil
}

func checkSteps(step, maxStep int64) error {
	const limit = 100_000_000 // the schema's CHECK
	if step < 1 || step > limit {
		return fmt.Errorf("step %d: must be between 1 and %d", step, limit)
	}
	if maxStep != 0 && (maxStep < step || maxStep > limit) {
		return fmt.Errorf("max_step %d: must be between step (%d) and %d", maxStep, step, limit)
	}
	return nil
}
