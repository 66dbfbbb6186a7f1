package allocator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var _ Admin = (*Postgres)(nil)

// Admin manages a store's tags: what `idmint tag` and an operator need.
// Postgres, SQLite and MemStore implement it.
type Admin interface {
	// CreateTag adds a tag. It returns ErrExists if the tag exists.
	CreateTag(ctx context.Context, spec TagSpec) (Tag, error)
	// Tags returns every tag, sorted by name.
	Tags(ctx context.Context) ([]Tag, error)
	// SetStep changes a tag's minimum and maximum segment size (maxStep 0
	// unsets the maximum). Instances apply it from their next segment load.
	SetStep(ctx context.Context, name string, step, maxStep int64) (Tag, error)
	// Bump raises a tag's max_id to at least to, or by by: the operator's
	// way out after the database went back in time (restored backup,
	// lagging replica). It never lowers max_id: when to is not above it,
	// it changes nothing and returns the tag with ErrNotRaised.
	Bump(ctx context.Context, name string, to, by int64) (Tag, error)
	// Describe changes a tag's description (at most 1000 characters).
	Describe(ctx context.Context, name, description string) (Tag, error)
	// SetRunway changes a tag's runway (0: the instance's, at most
	// MaxRunway, whole milliseconds). Instances apply it from their next
	// segment load.
	SetRunway(ctx context.Context, name string, runway time.Duration) (Tag, error)
}

// MaxRunway bounds a tag's runway, as the schemas' CHECK does: a day. The
// IDs a runway keeps in memory are a gap when an instance crashes, and
// max_step bounds what one range holds anyway.
const MaxRunway = 24 * time.Hour

// DefaultStep is the step of a tag created without one.
const DefaultStep = 1000

// TagSpec describes a tag to create.
type TagSpec struct {
	Name    string
	Step    int64 // minimum segment size (default DefaultStep)
	MaxStep int64 // maximum segment size; 0 leaves it unset (1,000,000)
	Start   int64 // first ID to hand out (default 1)
	// Runway is the tag's runway (0: the instance's; see Admin.SetRunway).
	Runway      time.Duration
	Description string
}

// withDefaults fills spec's defaults and checks it against the bounds the
// schemas enforce, so every store refuses the same specs with the same words.
func (spec TagSpec) withDefaults() (TagSpec, error) {
	if err := ValidateTag(spec.Name); err != nil {
		return TagSpec{}, err
	}
	if spec.Step == 0 {
		spec.Step = DefaultStep
	}
	if spec.Start == 0 {
		spec.Start = 1
	}
	if err := checkSteps(spec.Step, spec.MaxStep); err != nil {
		return TagSpec{}, err
	}
	if spec.Start < 1 {
		return TagSpec{}, fmt.Errorf("%w: start %d: must be at least 1", ErrInvalidSpec, spec.Start)
	}
	if top := lastStart(spec.Step); spec.Start > top {
		return TagSpec{}, fmt.Errorf("%w: start %d: leaves no room for one segment of step %d below 2^63-1: at most %d", ErrInvalidSpec, spec.Start, spec.Step, top)
	}
	if err := checkDescription(spec.Description); err != nil {
		return TagSpec{}, err
	}
	if err := checkRunway(spec.Runway); err != nil {
		return TagSpec{}, err
	}
	return spec, nil
}

// CreateTag implements Admin.
func (p *Postgres) CreateTag(ctx context.Context, spec TagSpec) (Tag, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return Tag{}, err
	}
	t, err := scanTag(p.pool.QueryRow(ctx, `
INSERT INTO idmint_tags (biz_tag, max_id, step, max_step, description, runway_ms)
VALUES ($1, $2, $3, NULLIF($4, 0), $5, $6)
RETURNING `+tagColumns, spec.Name, spec.Start-1, spec.Step, spec.MaxStep, spec.Description, spec.Runway.Milliseconds()))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return Tag{}, fmt.Errorf("%w: %q", ErrExists, spec.Name)
	}
	return t, err
}

// Tags implements Admin.
func (p *Postgres) Tags(ctx context.Context) ([]Tag, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+tagColumns+` FROM idmint_tags ORDER BY biz_tag`)
	if err != nil {
		return nil, fmt.Errorf("list tags: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Tag, error) { return scanTag(row) })
}

// SetStep implements Admin.
func (p *Postgres) SetStep(ctx context.Context, name string, step, maxStep int64) (Tag, error) {
	if err := checkSteps(step, maxStep); err != nil {
		return Tag{}, err
	}
	return p.updateTag(ctx, name, `step = $2, max_step = NULLIF($3, 0)`, step, maxStep)
}

// SetRunway implements Admin.
func (p *Postgres) SetRunway(ctx context.Context, name string, runway time.Duration) (Tag, error) {
	if err := checkRunway(runway); err != nil {
		return Tag{}, err
	}
	return p.updateTag(ctx, name, `runway_ms = $2`, runway.Milliseconds())
}

// Bump implements Admin. One statement raises max_id, and only if that
// raises it; otherwise the tag is read to say why nothing changed.
func (p *Postgres) Bump(ctx context.Context, name string, to, by int64) (Tag, error) {
	if err := checkBump(to, by); err != nil {
		return Tag{}, err
	}
	t, err := scanTag(p.pool.QueryRow(ctx, `
UPDATE idmint_tags
SET max_id = CASE WHEN $2::bigint > 0 THEN $2::bigint ELSE max_id + $3::bigint END, updated_at = now()
WHERE biz_tag = $1
  AND (($2::bigint > 0 AND max_id < $2::bigint AND $2::bigint <= 9223372036854775807 - step)
    OR ($2::bigint = 0 AND max_id <= 9223372036854775807 - step - $3::bigint))
RETURNING `+tagColumns, name, to, by))
	if !errors.Is(err, pgx.ErrNoRows) {
		return t, err
	}
	cur, err := scanTag(p.pool.QueryRow(ctx, `SELECT `+tagColumns+` FROM idmint_tags WHERE biz_tag = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return Tag{}, fmt.Errorf("%w: %q", ErrUnknownTag, name)
	}
	if err != nil {
		return Tag{}, err
	}
	_, err = bumped(cur, to, by)
	return cur, err
}

func (p *Postgres) updateTag(ctx context.Context, name, set string, args ...any) (Tag, error) {
	t, err := scanTag(p.pool.QueryRow(ctx,
		`UPDATE idmint_tags SET `+set+`, updated_at = now() WHERE biz_tag = $1 RETURNING `+tagColumns,
		append([]any{name}, args...)...))
	if errors.Is(err, pgx.ErrNoRows) {
		return Tag{}, fmt.Errorf("%w: %q", ErrUnknownTag, name)
	}
	return t, err
}

const tagColumns = `biz_tag, max_id, step, COALESCE(max_step, 0), description, runway_ms`

// rowScanner is a row of pgx or database/sql.
type rowScanner interface{ Scan(dest ...any) error }

func scanTag(row rowScanner) (Tag, error) {
	var t Tag
	var runwayMS int64
	if err := row.Scan(&t.Name, &t.MaxID, &t.Step, &t.MaxStep, &t.Description, &runwayMS); err != nil {
		return Tag{}, err
	}
	t.Runway = time.Duration(runwayMS) * time.Millisecond
	return t, nil
}

// checkRunway refuses a runway out of the schemas' bounds, or finer than
// the millisecond they store.
func checkRunway(runway time.Duration) error {
	if runway < 0 || runway > MaxRunway || runway%time.Millisecond != 0 {
		return fmt.Errorf("%w: runway %v: must be between 0 and %v, in whole milliseconds", ErrInvalidSpec, runway, MaxRunway)
	}
	return nil
}

func checkSteps(step, maxStep int64) error {
	const limit = 100_000_000 // the schema's CHECK
	if step < 1 || step > limit {
		return fmt.Errorf("%w: step %d: must be between 1 and %d", ErrInvalidSpec, step, limit)
	}
	if maxStep != 0 && (maxStep < step || maxStep > limit) {
		return fmt.Errorf("%w: max_step %d: must be between step (%d) and %d", ErrInvalidSpec, maxStep, step, limit)
	}
	return nil
}

func checkBump(to, by int64) error {
	if to < 0 || by < 0 || (to == 0) == (by == 0) {
		return fmt.Errorf("%w: bump: give exactly one of to or by, positive", ErrInvalidSpec)
	}
	return nil
}

// lastStart is the highest first ID that leaves room for one segment of
// step below 2^63-1 (step is at least 1).
func lastStart(step int64) int64 { return math.MaxInt64 - step + 1 }

// bumped returns the max_id a Bump of t sets. It returns ErrNotRaised when
// to does not raise t's max_id, and an error wrapping ErrInvalidSpec and
// ErrExhausted when the new max_id would leave no room for one segment of
// the tag's step below 2^63-1: such a bump would end the tag, not repair it.
func bumped(t Tag, to, by int64) (int64, error) {
	top := lastStart(t.Step) - 1 // the highest max_id with room for a segment
	if to > 0 {
		if to <= t.MaxID {
			return t.MaxID, fmt.Errorf("%w: max_id is already %d, at or above %d", ErrNotRaised, t.MaxID, to)
		}
		if to > top {
			return 0, fmt.Errorf("%w: bump to %d: leaves no room for one segment of step %d below 2^63-1: at most %d (%w)", ErrInvalidSpec, to, t.Step, top, ErrExhausted)
		}
		return to, nil
	}
	if t.MaxID > top || by > top-t.MaxID {
		return 0, fmt.Errorf("%w: bump by %d: leaves no room for one segment of step %d below 2^63-1: at most %d from max_id %d (%w)", ErrInvalidSpec, by, t.Step, max(top-t.MaxID, 0), t.MaxID, ErrExhausted)
	}
	return t.MaxID + by, nil
}
