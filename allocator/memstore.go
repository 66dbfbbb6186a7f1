package allocator

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/google/uuid"
)

var _ Store = (*MemStore)(nil)

// MemStore is a Store in memory, with the same semantics as Postgres. IDs
// are unique only for as long as the MemStore lives: use it in tests, or in
// a program that needs IDs unique within one process.
type MemStore struct {
	mu       sync.Mutex // protects tags and requests
	tags     map[string]*Tag
	requests map[uuid.UUID]Segment
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{tags: map[string]*Tag{}, requests: map[uuid.UUID]Segment{}}
}

// CreateTag adds a tag whose first ID will be start (at least 1).
func (m *MemStore) CreateTag(name string, step, maxStep, start int64) error {
	if err := ValidateTag(name); err != nil {
		return err
	}
	if step < 1 || (maxStep != 0 && maxStep < step) || start < 1 {
		return fmt.Errorf("create tag %q: invalid step %d, max_step %d or start %d", name, step, maxStep, start)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.tags[name]; ok {
		return fmt.Errorf("%w: %q", ErrExists, name)
	}
	m.tags[name] = &Tag{Name: name, MaxID: start - 1, Step: step, MaxStep: maxStep}
	return nil
}

// SetMaxID sets a tag's high-water mark, as a restored backup would.
func (m *MemStore) SetMaxID(name string, maxID int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tags[name].MaxID = maxID
}

// Tags returns the tags, sorted by name.
func (m *MemStore) Tags() []Tag {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Tag, 0, len(m.tags))
	for _, t := range m.tags {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Allocate implements Store.
func (m *MemStore) Allocate(ctx context.Context, req Request) (Segment, error) {
	if err := ctx.Err(); err != nil {
		return Segment{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.requests[req.ID]; ok {
		return Segment{}, ErrAlreadyGranted
	}
	t, ok := m.tags[req.Tag]
	if !ok {
		return Segment{}, fmt.Errorf("%w: %q", ErrUnknownTag, req.Tag)
	}
	size := bounds(req.Size, t.Step, t.MaxStep)
	if t.MaxID > math.MaxInt64-size {
		return Segment{}, fmt.Errorf("%w: %q at %d", ErrExhausted, req.Tag, t.MaxID)
	}
	t.MaxID += size
	seg := Segment{RequestID: req.ID, Tag: req.Tag, First: t.MaxID - size + 1, Last: t.MaxID, Step: t.Step, MaxStep: t.MaxStep}
	m.requests[req.ID] = seg
	return seg, nil
}

// Lookup implements Store.
func (m *MemStore) Lookup(ctx context.Context, id uuid.UUID) (Segment, error) {
	if err := ctx.Err(); err != nil {
		return Segment{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seg, ok := m.requests[id]
	if !ok {
		return Segment{}, ErrNotFound
	}
	return seg, nil
}

// Ping implements Store.
func (m *MemStore) Ping(ctx context.Context) error { return ctx.Err() }
