package memstore

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
)

// GiveBackRange implements allocator.Granter.
func (m *Store) GiveBackRange(ctx context.Context, id uuid.UUID, h allocator.Holder, tag string, first, last int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tags[tag]
	own, granted := m.requests[id]
	if granted && !own.Holder.Matches(h) {
		return false, fmt.Errorf("%w: request %s", allocator.ErrNotHolder, id)
	}
	_, returned := m.returned[id]
	if !ok || !granted || returned || t.MaxID != last || own.Tag != tag || own.First > first || own.Last != last {
		return false, nil
	}
	for _, e := range m.tailOf(tag, first) {
		seg := m.requests[e.id]
		if e.id != id && m.keptLastLocked(seg) >= max(first, seg.First) {
			return false, nil
		}
	}
	t.MaxID = first - 1
	if m.returned == nil {
		m.returned = map[uuid.UUID]int64{}
	}
	m.returned[id] = first
	return true, nil
}

// GiveBack implements allocator.Granter.
func (m *Store) GiveBack(ctx context.Context, tag string, first, last int64) (bool, error) {
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
	// As in the postgres store: the requests whose kept part reaches into [first,
	// last] keep only what lies below first.
	for _, e := range m.tailOf(tag, first) {
		if seg := m.requests[e.id]; seg.First <= last && m.keptLastLocked(seg) >= first {
			if m.returned == nil {
				m.returned = map[uuid.UUID]int64{}
			}
			m.returned[e.id] = max(seg.First, first)
		}
	}
	return true, nil
}

// keptLastLocked is the last ID seg keeps: returned - 1 once a give-back
// took its tail, below First when it took all.
func (m *Store) keptLastLocked(seg allocator.Segment) int64 {
	if from, ok := m.returned[seg.RequestID]; ok {
		return from - 1
	}
	return seg.Last
}
