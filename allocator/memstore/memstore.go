package allocator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/google/uuid"
)

var (
	_ Store = (*MemStore)(nil)
	_ Admin = (*MemStore)(nil)
)

// MemStore is a Store in memory, with the same semantics as Postgres. IDs
// are unique only for as long as the MemStore lives: use it in tests, or in
// a program that needs IDs unique within one process.
type MemStore struct {
	mu       sync.Mutex // protects tags, requests and returned
	tags     map[string]*Tag
	requests map[uuid.UUID]Segment
	// returned holds where the give-back of a request's range started
	// (GiveBackRange, GiveBack), by request ID: the request keeps
	// [First, returned - 1], as the returned_from column of Postgres.
	returned map[uuid.UUID]int64
	// tokens holds the bearer tokens (TokenStore).
	tokens []Token
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{tags: map[string]*Tag{}, requests: map[uuid.UUID]Segment{}}
}

// CreateTag implements Admin.
func (m *MemStore) CreateTag(ctx context.Context, spec TagSpec) (Tag, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return Tag{}, err
	}
	if err := ctx.Err(); err != nil {
		return Tag{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.tags[spec.Name]; ok {
		return Tag{}, fmt.Errorf("%w: %q", ErrExists, spec.Name)
	}
	t := &Tag{Name: spec.Name, MaxID: spec.Start - 1, Step: spec.Step, MaxStep: spec.MaxStep, Description: spec.Description}
	m.tags[spec.Name] = t
	return *t, nil
}

// SetMaxID sets a tag's high-water mark, as a restored backup would.
func (m *MemStore) SetMaxID(name string, maxID int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tags[name].MaxID = maxID
}

// Tags implements Admin.
func (m *MemStore) Tags(ctx context.Context) ([]Tag, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Tag, 0, len(m.tags))
	for _, t := range m.tags {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// SetStep implements Admin.
func (m *MemStore) SetStep(ctx context.Context, name string, step, maxStep int64) (Tag, error) {
	if err := checkSteps(step, maxStep); err != nil {
		return Tag{}, err
	}
	return m.update(ctx, name, func(t *Tag) error {
		t.Step, t.MaxStep = step, maxStep
		return nil
	})
}

// Bump implements Admin.
func (m *MemStore) Bump(ctx context.Context, name string, to, by int64) (Tag, error) {
	if err := checkBump(to, by); err != nil {
		return Tag{}, err
	}
	var cur Tag
	t, err := m.update(ctx, name, func(t *Tag) error {
		cur = *t
		maxID, err := bumped(*t, to, by)
		t.MaxID = maxID
		return err
	})
	if errors.Is(err, ErrNotRaised) {
		return cur, err
	}
	return t, err
}

// update applies change to a copy of the tag and stores it if change
// succeeds.
func (m *MemStore) update(ctx context.Context, name string, change func(*Tag) error) (Tag, error) {
	if err := ctx.Err(); err != nil {
		return Tag{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tags[name]
	if !ok {
		return Tag{}, fmt.Errorf("%w: %q", ErrUnknownTag, name)
	}
	c := *t
	if err := change(&c); err != nil {
		return Tag{}, err
	}
	*t = c
	return c, nil
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
	floor := FloorOf(t.MaxID, req)
	base := max(t.MaxID, floor) // a max_id below the floor is raised to it
	if base > math.MaxInt64-size {
		return Segment{}, fmt.Errorf("%w: %q at %d", ErrExhausted, req.Tag, base)
	}
	seg := Segment{RequestID: req.ID, Tag: req.Tag, First: base + 1, Last: base + size, Step: t.Step, MaxStep: t.MaxStep,
		Repaired: t.MaxID < floor, FoundMaxID: t.MaxID, Holder: req.Holder}
	t.MaxID = seg.Last
	m.requests[req.ID] = seg
	return seg, nil
}

var _ Returner = (*MemStore)(nil)

// GiveBack implements Returner.
func (m *MemStore) GiveBack(ctx context.Context, tag string, first, last int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if first < 1 || first > last {
		return false, fmt.Errorf("give back %q: invalid range [%d, %d]", tag, first, last)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tags[tag]
	if !ok || t.MaxID != last {
		return false, nil
	}
	t.MaxID = first - 1
	// As in Postgres: the requests whose kept part reaches into [first,
	// last] keep only what lies below first.
	for rid, seg := range m.requests {
		kept := seg.Last
		if from, ok := m.returned[rid]; ok {
			kept = from - 1
		}
		if seg.Tag == tag && seg.First <= last && kept >= first {
			if m.returned == nil {
				m.returned = map[uuid.UUID]int64{}
			}
			m.returned[rid] = max(seg.First, first)
		}
	}
	return true, nil
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
	seg.Repaired, seg.FoundMaxID = false, 0 // as a segment log row: no repair recorded
	if from, ok := m.returned[id]; ok {
		seg.Last = from - 1 // a give-back took the rest
	}
	if seg.Last < seg.First {
		return seg, fmt.Errorf("%w: request %s (%q from %d)", ErrGivenBack, id, seg.Tag, seg.First)
	}
	return seg, nil
}

// Ping implements Store.
func (m *MemStore) Ping(ctx context.Context) error { return ctx.Err() }
