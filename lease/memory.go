package lease

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idmint/idmint/snowflake"
)

var _ snowflake.LeaseStore = (*Memory)(nil)

// Memory is a LeaseStore in memory, with the semantics of Postgres, for
// tests: several snowflake.Nodes of one process may share it. Its clock is
// injected.
type Memory struct {
	now func() time.Time

	mu      sync.Mutex // protects the fields below
	layout  *snowflake.Layout
	workers []row
}

// row is one worker ID's lease, as in the database.
type row struct {
	holder   string
	epoch    int64
	released bool
	expires  int64 // Unix ms
	floor    int64 // Unix ms
}

// NewMemory returns an empty store whose clock is now (time.Now if nil).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now}
}

// Prepare implements snowflake.LeaseStore.
func (m *Memory) Prepare(_ context.Context, l snowflake.Layout) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.layout == nil {
		m.layout = &l
		m.workers = make([]row, l.MaxWorker()+1)
		for i := range m.workers {
			m.workers[i].released = true
		}
		return nil
	}
	return sameLayout(*m.layout, l)
}

// Acquire implements snowflake.LeaseStore.
func (m *Memory) Acquire(_ context.Context, req snowflake.AcquireRequest) (snowflake.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().UnixMilli()
	// The lowest released row, else the lowest expired one.
	pick := -1
	for i := int(req.MinWorker); i < len(m.workers) && int64(i) <= req.MaxWorker; i++ {
		if w := &m.workers[i]; w.released {
			pick = i
			break
		} else if w.expires < now && pick < 0 {
			pick = i
		}
	}
	if pick < 0 {
		return snowflake.Lease{}, snowflake.ErrAllHeld
	}
	w := &m.workers[pick]
	l := snowflake.Lease{Worker: int64(pick), Holder: req.Holder, Start: startAfter(w.floor, w.released, req.Margin), Expires: now + req.TTL.Milliseconds(), DBTime: now}
	w.holder, w.released, w.expires = req.Holder, false, l.Expires
	w.epoch++
	w.floor = max(w.floor, l.Expires-req.Margin.Milliseconds())
	l.Epoch = w.epoch
	return l, nil
}

// Renew implements snowflake.LeaseStore.
func (m *Memory) Renew(_ context.Context, l snowflake.Lease, ttl, margin time.Duration) (snowflake.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, err := m.heldLocked(l)
	if err != nil {
		return snowflake.Lease{}, err
	}
	now := m.now().UnixMilli()
	w.expires = now + ttl.Milliseconds()
	w.floor = max(w.floor, w.expires-margin.Milliseconds())
	l.Expires, l.DBTime = w.expires, now
	return l, nil
}

// Release implements snowflake.LeaseStore.
func (m *Memory) Release(_ context.Context, l snowflake.Lease, floor int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, err := m.heldLocked(l)
	if err != nil {
		return err
	}
	w.released, w.floor = true, max(floor, 0)
	return nil
}

func (m *Memory) heldLocked(l snowflake.Lease) (*row, error) {
	if l.Worker < 0 || l.Worker >= int64(len(m.workers)) {
		return nil, fmt.Errorf("%w: no worker id %d", snowflake.ErrLeaseLost, l.Worker)
	}
	w := &m.workers[l.Worker]
	if w.epoch != l.Epoch || w.holder != l.Holder || w.released {
		return nil, fmt.Errorf("%w: worker id %d is at epoch %d", snowflake.ErrLeaseLost, l.Worker, w.epoch)
	}
	return w, nil
}

// startAfter is the first millisecond a new holder may use: after the time
// floor, plus the margin when the previous holder did not release the row
// (its clock may have run up to a margin ahead of the database's).
func startAfter(floor int64, released bool, margin time.Duration) int64 {
	if released {
		return floor + 1
	}
	return floor + margin.Milliseconds() + 1
}

// sameLayout returns ErrLayoutMismatch unless the layouts are equal.
func sameLayout(have, want snowflake.Layout) error {
	if have.TimeBits != want.TimeBits || have.WorkerBits != want.WorkerBits || have.SequenceBits != want.SequenceBits ||
		have.EpochMillis() != want.EpochMillis() {
		return fmt.Errorf("%w: the database has %s, this instance %s", snowflake.ErrLayoutMismatch, have, want)
	}
	return nil
}
