package memstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/idmint/idmint/allocator"
)

// Describe implements allocator.Admin.
func (m *Store) Describe(ctx context.Context, name, description string) (allocator.Tag, error) {
	if err := allocator.CheckDescription(description); err != nil {
		return allocator.Tag{}, err
	}
	return m.update(ctx, name, func(t *allocator.Tag) error {
		t.Description = description
		return nil
	})
}

// CreateTag implements allocator.Admin.
func (m *Store) CreateTag(ctx context.Context, spec allocator.TagSpec) (allocator.Tag, error) {
	spec, err := spec.WithDefaults()
	if err != nil {
		return allocator.Tag{}, err
	}
	if err := ctx.Err(); err != nil {
		return allocator.Tag{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.tags[spec.Name]; ok {
		return allocator.Tag{}, fmt.Errorf("%w: %q", allocator.ErrExists, spec.Name)
	}
	t := &allocator.Tag{Name: spec.Name, MaxID: spec.Start - 1, Step: spec.Step, MaxStep: spec.MaxStep, Runway: spec.Runway, Description: spec.Description}
	m.tags[spec.Name] = t
	return *t, nil
}

// SetMaxID sets a tag's high-water mark, as a restored backup would.
func (m *Store) SetMaxID(name string, maxID int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tags[name].MaxID = maxID
}

// Tags implements allocator.Admin.
func (m *Store) Tags(ctx context.Context) ([]allocator.Tag, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]allocator.Tag, 0, len(m.tags))
	for _, t := range m.tags {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// SetStep implements allocator.Admin.
func (m *Store) SetStep(ctx context.Context, name string, step, maxStep int64) (allocator.Tag, error) {
	if err := allocator.CheckSteps(step, maxStep); err != nil {
		return allocator.Tag{}, err
	}
	return m.update(ctx, name, func(t *allocator.Tag) error {
		t.Step, t.MaxStep = step, maxStep
		return nil
	})
}

// SetRunway implements allocator.Admin.
func (m *Store) SetRunway(ctx context.Context, name string, runway time.Duration) (allocator.Tag, error) {
	if err := allocator.CheckRunway(runway); err != nil {
		return allocator.Tag{}, err
	}
	return m.update(ctx, name, func(t *allocator.Tag) error {
		t.Runway = runway
		return nil
	})
}

// Bump implements allocator.Admin.
func (m *Store) Bump(ctx context.Context, name string, to, by int64) (allocator.Tag, error) {
	if err := allocator.CheckBump(to, by); err != nil {
		return allocator.Tag{}, err
	}
	var cur allocator.Tag
	t, err := m.update(ctx, name, func(t *allocator.Tag) error {
		cur = *t
		maxID, err := allocator.Bumped(*t, to, by)
		t.MaxID = maxID
		return err
	})
	if errors.Is(err, allocator.ErrNotRaised) {
		return cur, err
	}
	return t, err
}

// update applies change to a copy of the tag and stores it if change
// succeeds.
func (m *Store) update(ctx context.Context, name string, change func(*allocator.Tag) error) (allocator.Tag, error) {
	if err := ctx.Err(); err != nil {
		return allocator.Tag{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tags[name]
	if !ok {
		return allocator.Tag{}, fmt.Errorf("%w: %q", allocator.ErrUnknownTag, name)
	}
	c := *t
	if err := change(&c); err != nil {
		return allocator.Tag{}, err
	}
	*t = c
	return c, nil
}
