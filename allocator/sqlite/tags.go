package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/sqlstore"
)

// Describe implements allocator.Admin.
func (s *Store) Describe(ctx context.Context, name, description string) (allocator.Tag, error) {
	if err := allocator.CheckDescription(description); err != nil {
		return allocator.Tag{}, err
	}
	return s.updateTag(ctx, name, func(allocator.Tag) (string, []any, error) {
		return `description = ?`, []any{description}, nil
	})
}

// CreateTag implements allocator.Admin.
func (s *Store) CreateTag(ctx context.Context, spec allocator.TagSpec) (allocator.Tag, error) {
	spec, err := spec.WithDefaults()
	if err != nil {
		return allocator.Tag{}, err
	}
	var t allocator.Tag
	err = s.write(ctx, func(tx *sql.Tx) error {
		if err := checkBlock(ctx, tx, spec.MaxStep); err != nil {
			return err
		}
		var err error
		t, err = sqlstore.ScanTag(tx.QueryRowContext(ctx, `
INSERT INTO idmint_tags (biz_tag, max_id, step, max_step, description, runway_ms)
VALUES (?, ?, ?, NULLIF(?, 0), ?, ?)
RETURNING `+sqlstore.TagColumns, spec.Name, spec.Start-1, spec.Step, spec.MaxStep, spec.Description, spec.Runway.Milliseconds()))
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
			return fmt.Errorf("%w: %q", allocator.ErrExists, spec.Name)
		}
		return err
	})
	return t, err
}

// Tags implements allocator.Admin.
func (s *Store) Tags(ctx context.Context) ([]allocator.Tag, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+sqlstore.TagColumns+` FROM idmint_tags ORDER BY biz_tag`)
	if err != nil {
		return nil, fmt.Errorf("list tags: %w", err)
	}
	defer rows.Close()
	var tags []allocator.Tag
	for rows.Next() {
		t, err := sqlstore.ScanTag(rows)
		if err != nil {
			return nil, fmt.Errorf("list tags: %w", err)
		}
		tags = append(tags, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tags: %w", err)
	}
	return tags, nil
}

// SetStep implements allocator.Admin.
func (s *Store) SetStep(ctx context.Context, name string, step, maxStep int64) (allocator.Tag, error) {
	if err := allocator.CheckSteps(step, maxStep); err != nil {
		return allocator.Tag{}, err
	}
	return s.updateTag(ctx, name, func(allocator.Tag) (string, []any, error) {
		return `step = ?, max_step = NULLIF(?, 0)`, []any{step, maxStep}, nil
	}, func(tx *sql.Tx) error { return checkBlock(ctx, tx, maxStep) })
}

// SetRunway implements allocator.Admin.
func (s *Store) SetRunway(ctx context.Context, name string, runway time.Duration) (allocator.Tag, error) {
	if err := allocator.CheckRunway(runway); err != nil {
		return allocator.Tag{}, err
	}
	return s.updateTag(ctx, name, func(allocator.Tag) (string, []any, error) {
		return `runway_ms = ?`, []any{runway.Milliseconds()}, nil
	})
}

// Bump implements allocator.Admin. The new max_id is computed here rather than in SQL:
// SQLite turns an integer overflow into a float instead of failing.
func (s *Store) Bump(ctx context.Context, name string, to, by int64) (allocator.Tag, error) {
	if err := allocator.CheckBump(to, by); err != nil {
		return allocator.Tag{}, err
	}
	var cur allocator.Tag
	t, err := s.updateTag(ctx, name, func(t allocator.Tag) (string, []any, error) {
		cur = t
		maxID, err := allocator.Bumped(t, to, by)
		return `max_id = ?`, []any{maxID}, err
	})
	if errors.Is(err, allocator.ErrNotRaised) {
		return cur, err
	}
	return t, err
}

// updateTag reads the tag and applies the SET clause that change returns
// for it, in one write transaction.
func (s *Store) updateTag(ctx context.Context, name string, change func(allocator.Tag) (string, []any, error), checks ...func(*sql.Tx) error) (allocator.Tag, error) {
	var t allocator.Tag
	err := s.write(ctx, func(tx *sql.Tx) error {
		for _, check := range checks {
			if err := check(tx); err != nil {
				return err
			}
		}
		var err error
		t, err = sqlstore.ScanTag(tx.QueryRowContext(ctx, `SELECT `+sqlstore.TagColumns+` FROM idmint_tags WHERE biz_tag = ?`, name))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %q", allocator.ErrUnknownTag, name)
		}
		if err != nil {
			return err
		}
		set, args, err := change(t)
		if err != nil {
			return err
		}
		t, err = sqlstore.ScanTag(tx.QueryRowContext(ctx,
			`UPDATE idmint_tags SET `+set+`, updated_at = `+nowSQL+` WHERE biz_tag = ? RETURNING `+sqlstore.TagColumns,
			append(args, name)...))
		return err
	})
	return t, err
}
