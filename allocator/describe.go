package allocator

import (
	"context"
	"fmt"
	"unicode/utf8"
)

// checkDescription bounds a description as the schemas do.
func checkDescription(d string) error {
	if n := utf8.RuneCountInString(d); n > 1000 {
		return fmt.Errorf("%w: description: %d characters, at most 1000", ErrInvalidSpec, n)
	}
	return nil
}

// Describe implements Admin.
func (p *Postgres) Describe(ctx context.Context, name, description string) (Tag, error) {
	if err := checkDescription(description); err != nil {
		return Tag{}, err
	}
	return p.updateTag(ctx, name, `description = $2`, description)
}

// Describe implements Admin.
func (s *SQLite) Describe(ctx context.Context, name, description string) (Tag, error) {
	if err := checkDescription(description); err != nil {
		return Tag{}, err
	}
	return s.updateTag(ctx, name, func(Tag) (string, []any, error) {
		return `description = ?`, []any{description}, nil
	})
}

// Describe implements Admin.
func (m *MemStore) Describe(ctx context.Context, name, description string) (Tag, error) {
	if err := checkDescription(description); err != nil {
		return Tag{}, err
	}
	return m.update(ctx, name, func(t *Tag) error {
		t.Description = description
		return nil
	})
}
