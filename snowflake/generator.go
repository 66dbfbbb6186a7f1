package snowflake

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Window is what one lease allows: the worker ID, its fencing epoch, and the
// timestamps the holder may use.
type Window struct {
	Worker, Epoch int64
	// Start and End are the first and last millisecond (Unix) the holder may
	// put in an ID. Start is after every timestamp an earlier holder of the
	// worker ID may have used; End is a margin before the lease expires.
	Start, End int64
	// Deadline ends the window by the generator's clock: a margin before the
	// lease expires, counted from before the request that obtained it.
	Deadline time.Time
}

// Generator mints IDs for the worker ID of its current Window. It is safe
// for concurrent use; all goroutines share one sequence.
type Generator struct {
	layout  Layout
	clock   Clock
	maxWait time.Duration

	mu        sync.Mutex // protects the fields below
	win       Window
	held      bool  // win is a lease in force (not revoked)
	suspended error // while set, every request fails with it
	last      int64 // Unix ms of the last ID issued, or the floor below which none may be
	seq       int64 // sequence of the last ID issued in ms last

	issued, seqWaits, clockWaits atomic.Int64
	refused                      [numReasons]atomic.Int64
}

// NewGenerator returns a generator that holds no worker ID yet (it refuses
// with ErrNoWorker until Install). maxWait bounds how long one request waits
// for the clock to reach a usable millisecond (after a backwards step, or
// before a new window starts); beyond it the request fails with
// ErrClockBackwards.
func NewGenerator(layout Layout, clock Clock, maxWait time.Duration) (*Generator, error) {
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = NewMonotonicClock()
	}
	return &Generator{layout: layout, clock: clock, maxWait: maxWait}, nil
}

// Layout returns the generator's layout.
func (g *Generator) Layout() Layout { return g.layout }

// Install makes w the window in force. The same worker ID and epoch as the
// window held extends it (a renewal: End and Deadline only grow). Anything
// else is a new lease: its IDs start after every ID issued so far, so that
// the IDs of one generator always increase.
func (g *Generator) Install(w Window) error {
	if w.Worker < 0 || w.Worker > g.layout.MaxWorker() {
		return fmt.Errorf("worker id %d outside 0…%d of layout %s", w.Worker, g.layout.MaxWorker(), g.layout.Bits())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held && w.Worker == g.win.Worker && w.Epoch == g.win.Epoch {
		g.win.End = max(g.win.End, w.End)
		if w.Deadline.After(g.win.Deadline) {
			g.win.Deadline = w.Deadline
		}
		return nil
	}
	g.win, g.held = w, true
	// The next ID takes a millisecond after last and at or after Start.
	g.last = max(g.last, w.Start-1)
	g.seq = g.layout.MaxSequence()
	return nil
}

// Revoke ends the window: no ID is issued until the next Install. It returns
// the last millisecond used (at least the window's Start-1), the time floor
// to persist when the lease is released.
func (g *Generator) Revoke() (floor int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held = false
	return g.last
}

// Suspend makes every request fail with err until Suspend(nil). The window
// stays installed.
func (g *Generator) Suspend(err error) {
	g.mu.Lock()
	g.suspended = err
	g.mu.Unlock()
}

// Next returns one ID.
func (g *Generator) Next(ctx context.Context) (int64, error) {
	var buf [1]int64
	ids, err := g.fill(ctx, buf[:0], 1)
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// NextN returns n increasing IDs. A batch takes the whole rest of a
// millisecond's sequence at once, so batches reach the layout's limit
// (4,096 IDs per millisecond by default).
func (g *Generator) NextN(ctx context.Context, n int) ([]int64, error) {
	if n < 1 {
		return nil, fmt.Errorf("snowflake: count %d: want at least 1", n)
	}
	return g.fill(ctx, make([]int64, 0, n), n)
}

// fill appends IDs to ids until it holds n, waiting (bounded) for the clock
// when the sequence of a millisecond is used up or the clock is behind.
func (g *Generator) fill(ctx context.Context, ids []int64, n int) ([]int64, error) {
	for {
		var (
			wait time.Duration
			kind *atomic.Int64
			err  error
		)
		ids, wait, kind, err = g.take(ids, n)
		if err != nil {
			return nil, err
		}
		if len(ids) == n {
			return ids, nil
		}
		if kind == nil {
			continue // the millisecond's sequence ran out: take again
		}
		kind.Add(1)
		if err := g.clock.Sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("snowflake: waiting for the clock: %w", err)
		}
	}
}

// take appends as many IDs as the current millisecond allows. When it
// cannot append, it says how long to wait and which wait counter to bump.
func (g *Generator) take(ids []int64, n int) ([]int64, time.Duration, *atomic.Int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock.Now()
	ms, err := g.checkLocked(now)
	if err != nil {
		return ids, 0, nil, err
	}
	// The lowest usable millisecond: the window's start, or the last one
	// used (whose sequence may have room left).
	lo := max(g.win.Start, g.last)
	if ms < lo {
		behind := time.Duration(lo-ms) * time.Millisecond
		if behind > g.maxWait {
			g.refused[reasonBackwards].Add(1)
			return ids, 0, nil, fmt.Errorf("%w: %v behind (longest wait %v)", ErrClockBackwards, behind, g.maxWait)
		}
		return ids, time.UnixMilli(lo).Sub(now), &g.clockWaits, nil
	}
	if ms > g.last {
		g.last, g.seq = ms, -1
	}
	maxSeq := g.layout.MaxSequence()
	if g.seq >= maxSeq {
		return ids, time.UnixMilli(ms + 1).Sub(now), &g.seqWaits, nil
	}
	since := ms - g.layout.EpochMillis()
	if !g.layout.inRange(ms) {
		g.refused[reasonExhausted].Add(1)
		return ids, 0, nil, fmt.Errorf("%w: %d ms since the epoch %s", ErrTimeExhausted, since, g.layout.Epoch.UTC().Format(time.RFC3339))
	}
	k := 0
	for len(ids) < n && g.seq < maxSeq {
		g.seq++
		ids = append(ids, g.layout.compose(since, g.win.Worker, g.seq))
		k++
	}
	g.issued.Add(int64(k))
	return ids, 0, nil, nil
}

// checkLocked returns the current millisecond if the window allows issuing
// at now, or why not.
func (g *Generator) checkLocked(now time.Time) (int64, error) {
	ms := now.UnixMilli()
	switch {
	case !g.held:
		g.refused[reasonNoWorker].Add(1)
		return 0, ErrNoWorker
	case g.suspended != nil:
		g.refused[reasonSkew].Add(1)
		return 0, g.suspended
	// At the deadline the window has ended: from that instant on the
	// node releases the lease (Node.renew) with the last millisecond
	// used as the next holder's floor.
	case !now.Before(g.win.Deadline), ms > g.win.End:
		g.refused[reasonExpired].Add(1)
		return 0, fmt.Errorf("%w: worker id %d, epoch %d: the lease was not renewed in time", ErrLeaseExpired, g.win.Worker, g.win.Epoch)
	}
	return ms, nil
}

// Refusal reasons, counted apart.
const (
	reasonNoWorker = iota
	reasonExpired
	reasonSkew
	reasonBackwards
	reasonExhausted
	numReasons
)

// GeneratorStats is a snapshot of a Generator.
type GeneratorStats struct {
	Held          bool
	Window        Window
	Suspended     error
	LastMillis    int64 // Unix ms of the last ID issued (or the floor)
	Issued        int64
	SequenceWaits int64 // waits for the next millisecond: its sequence was used up
	ClockWaits    int64 // waits for the clock to reach the last ms used or the window's start
	// Refused counts requests refused: no worker ID, lease window over,
	// clock skew, clock backwards beyond the longest wait, time bits used up.
	RefusedNoWorker, RefusedExpired, RefusedSkew, RefusedBackwards, RefusedExhausted int64
}

// Refused is the number of requests refused for any reason.
func (s GeneratorStats) Refused() int64 {
	return s.RefusedNoWorker + s.RefusedExpired + s.RefusedSkew + s.RefusedBackwards + s.RefusedExhausted
}

// Stats returns a snapshot.
func (g *Generator) Stats() GeneratorStats {
	g.mu.Lock()
	s := GeneratorStats{Held: g.held, Window: g.win, Suspended: g.suspended, LastMillis: g.last}
	g.mu.Unlock()
	s.Issued, s.SequenceWaits, s.ClockWaits = g.issued.Load(), g.seqWaits.Load(), g.clockWaits.Load()
	s.RefusedNoWorker = g.refused[reasonNoWorker].Load()
	s.RefusedExpired = g.refused[reasonExpired].Load()
	s.RefusedSkew = g.refused[reasonSkew].Load()
	s.RefusedBackwards = g.refused[reasonBackwards].Load()
	s.RefusedExhausted = g.refused[reasonExhausted].Load()
	return s
}

// Ready reports whether an ID could be issued now, and if not why, without
// issuing one or counting a refusal.
func (g *Generator) Ready() error {
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := now.UnixMilli()
	switch {
	case !g.held:
		return ErrNoWorker
	case g.suspended != nil:
		return g.suspended
	case !now.Before(g.win.Deadline), ms > g.win.End:
		return ErrLeaseExpired
	case time.Duration(max(g.win.Start, g.last)-ms)*time.Millisecond > g.maxWait:
		return ErrClockBackwards
	case !g.layout.inRange(max(ms, g.win.Start, g.last)):
		return ErrTimeExhausted
	}
	return nil
}
