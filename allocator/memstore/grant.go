package memstore

import (
	"context"
	"fmt"
	"math"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
)

// Allocate implements allocator.Store.
func (m *Store) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	if err := ctx.Err(); err != nil {
		return allocator.Segment{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.requests[req.ID]; ok {
		return allocator.Segment{}, allocator.ErrAlreadyGranted
	}
	t, ok := m.tags[req.Tag]
	if !ok {
		return allocator.Segment{}, fmt.Errorf("%w: %q", allocator.ErrUnknownTag, req.Tag)
	}
	if allocator.FloorRefused(t.MaxID, req) {
		return allocator.Segment{}, fmt.Errorf("%w: %q at max_id %d, floor %d claimed", allocator.ErrFloorBudget, req.Tag, t.MaxID, req.ClaimedFloor)
	}
	size := allocator.SizeOf(req.Size, t.Step, t.MaxStep)
	floor := allocator.FloorOf(t.MaxID, req)
	base := max(t.MaxID, floor) // a max_id below the floor is raised to it
	if base > math.MaxInt64-size {
		return allocator.Segment{}, fmt.Errorf("%w: %q at %d", allocator.ErrExhausted, req.Tag, base)
	}
	seg := allocator.Segment{RequestID: req.ID, Tag: req.Tag, First: base + 1, Last: base + size, Step: t.Step, MaxStep: t.MaxStep, Runway: t.Runway,
		Repaired: t.MaxID < floor, FoundMaxID: t.MaxID, Lead: allocator.ClaimedLeadOf(t.MaxID, floor, req), Holder: req.Holder}
	t.MaxID = seg.Last
	m.requests[req.ID] = seg
	m.logLocked(seg)
	return seg, nil
}

// Lookup implements allocator.Store.
func (m *Store) Lookup(ctx context.Context, id uuid.UUID) (allocator.Segment, error) {
	if err := ctx.Err(); err != nil {
		return allocator.Segment{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seg, ok := m.requests[id]
	if !ok {
		return allocator.Segment{}, allocator.ErrNotFound
	}
	seg.Repaired, seg.FoundMaxID, seg.Lead = false, 0, 0 // as a segment log row: no repair recorded
	if t := m.tags[seg.Tag]; t != nil {
		// The tag's settings now, as the SQL stores join its row.
		seg.Step, seg.MaxStep, seg.Runway = t.Step, t.MaxStep, t.Runway
	}
	if from, ok := m.returned[id]; ok {
		seg.Last = from - 1 // a give-back took the rest
	}
	if seg.Last < seg.First {
		return seg, fmt.Errorf("%w: request %s (%q from %d)", allocator.ErrGivenBack, id, seg.Tag, seg.First)
	}
	return seg, nil
}
