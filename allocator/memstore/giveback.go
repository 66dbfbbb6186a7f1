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
	for rid, seg := range m.requests {
		kept := seg.Last
		if from, ok := m.returned[rid]; ok {
			kept = from - 1
		}
		if rid != id && seg.Tag == tag && kept >= max(first, seg.First) {
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
