package snowflake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// LeaseStore leases worker IDs: rows in the database, one per worker ID,
// holding the holder, a fencing epoch, the expiry and a time floor.
type LeaseStore interface {
	// Prepare records the layout (or checks the one recorded: another
	// layout is ErrLayoutMismatch) and creates a row for every worker ID.
	Prepare(ctx context.Context, l Layout) error
	// Acquire takes one free or expired worker ID, in one atomic step that
	// bumps its epoch, sets its expiry to the database's time plus TTL and
	// its time floor to the new window's end. Lease.Start is after the time
	// floor left by the previous holder (plus the margin when that holder
	// did not release it). ErrAllHeld when every worker ID is held.
	Acquire(ctx context.Context, req AcquireRequest) (Lease, error)
	// Renew extends a lease held with the same epoch to the database's time
	// plus TTL and raises the time floor to the window's new end;
	// ErrLeaseLost when the worker ID has another holder or was released.
	Renew(ctx context.Context, l Lease, ttl, margin time.Duration) (Lease, error)
	// Release frees the worker ID and sets its time floor to floor, the last
	// millisecond used; ErrLeaseLost when it was not held anymore.
	Release(ctx context.Context, l Lease, floor int64) error
}

// AcquireRequest asks a LeaseStore for a worker ID.
type AcquireRequest struct {
	Holder string
	// MinWorker and MaxWorker bound the eligible worker IDs, inclusive:
	// the whole layout's, or a region's slice of them.
	MinWorker, MaxWorker int64
	TTL                  time.Duration
	Margin               time.Duration
}

// WorkerRange is the worker IDs [First, Last] a node may lease.
type WorkerRange struct{ First, Last int64 }

// Lease is a worker ID held until Expires, by the database's clock. Times
// are Unix milliseconds.
type Lease struct {
	Worker, Epoch int64
	Holder        string
	// Start is the first millisecond the holder may use.
	Start int64
	// Expires is when the lease ends unless renewed.
	Expires int64
	// DBTime is the database's clock when it granted or renewed the lease.
	DBTime int64
}

// MaxHolder is the longest holder name a lease row takes.
const MaxHolder = 200

// Config configures a Node. Zero fields take the defaults named.
type Config struct {
	Layout Layout
	Store  LeaseStore
	// Holder names this instance in the lease rows.
	Holder string
	// Workers bounds the worker IDs this node leases from: a region's
	// slice of the worker-ID space (region.WorkerSlice), so that regions,
	// with databases of their own, never lease the same one. Nil: every
	// worker ID of the layout.
	Workers *WorkerRange
	// TTL is how long a lease lasts without renewal (default 1m): the
	// longest database outage that Snowflake IDs ride through, and how long
	// the worker ID of a killed instance stays taken.
	TTL time.Duration
	// RenewEvery is how often the lease is renewed (default TTL/6); at most
	// (TTL-Margin)/2, so that one failed renewal costs nothing.
	RenewEvery time.Duration
	// Margin (default 1s) ends the lease window that much before the lease
	// expires, starts the next holder's that much after, and is the largest
	// clock difference with the database that is tolerated.
	Margin time.Duration
	// MaxWait bounds a request's wait for the clock after a backwards step
	// (default Margin).
	MaxWait time.Duration
	Clock   Clock
	Logger  *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Store == nil {
		return errors.New("snowflake: no lease store")
	}
	if len(c.Holder) > MaxHolder {
		return fmt.Errorf("snowflake: holder name of %d bytes: at most %d", len(c.Holder), MaxHolder)
	}
	if err := c.Layout.Validate(); err != nil {
		return err
	}
	if c.Workers == nil {
		c.Workers = &WorkerRange{First: 0, Last: c.Layout.MaxWorker()}
	}
	if w := c.Workers; w.First < 0 || w.First > w.Last || w.Last > c.Layout.MaxWorker() {
		return fmt.Errorf("snowflake: worker ids %d…%d outside 0…%d of layout %s", w.First, w.Last, c.Layout.MaxWorker(), c.Layout.Bits())
	}
	if c.TTL <= 0 {
		c.TTL = time.Minute
	}
	if c.Margin <= 0 {
		c.Margin = time.Second
	}
	if c.RenewEvery <= 0 {
		c.RenewEvery = c.TTL / 6
	}
	if c.MaxWait <= 0 {
		c.MaxWait = c.Margin
	}
	if c.Clock == nil {
		c.Clock = NewMonotonicClock()
	}
	if now := c.Clock.Now().UnixMilli(); now-c.Layout.EpochMillis() > c.Layout.MaxMillis() {
		return fmt.Errorf("%w: %s: its %d time bits ran out at %s", ErrInvalidLayout, c.Layout, c.Layout.TimeBits,
			time.UnixMilli(c.Layout.EpochMillis()+c.Layout.MaxMillis()).UTC().Format(time.RFC3339))
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Margin.Milliseconds() < 1 || c.TTL < 4*c.Margin {
		return fmt.Errorf("snowflake: lease ttl %v and margin %v: want a margin of 1ms or more and a ttl of 4 margins or more", c.TTL, c.Margin)
	}
	if c.RenewEvery > (c.TTL-c.Margin)/2 {
		return fmt.Errorf("snowflake: renewing every %v with a ttl of %v and a margin of %v: renew at most every (ttl-margin)/2", c.RenewEvery, c.TTL, c.Margin)
	}
	return nil
}

// Node is one instance's Snowflake generator with its leased worker ID: it
// acquires a worker ID, renews it in the background, and releases it on
// Close. While it holds none it keeps trying, and requests fail with
// ErrNoWorker.
type Node struct {
	cfg Config
	gen *Generator

	stop context.CancelFunc
	done chan struct{} // closed when the lease loop has ended

	mu           sync.Mutex // protects the fields below
	lease        *Lease     // nil while none is held
	localExpiry  time.Time  // the lease's expiry by the clock
	offset       time.Duration
	acquisitions int64
	renewals     int64
	renewFails   int64
	lost         int64
	lastErr      error
	lastAlarm    time.Time // the last clock-backwards alarm logged
}

// Start checks the layout against the store's, tries once to lease a worker
// ID, and keeps the lease (or keeps trying) in the background until Close.
// It fails on a layout mismatch or when the store cannot be prepared.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	gen, err := NewGenerator(cfg.Layout, cfg.Clock, cfg.MaxWait)
	if err != nil {
		return nil, err
	}
	if err := cfg.Store.Prepare(ctx, cfg.Layout); err != nil {
		return nil, fmt.Errorf("snowflake leases: %w", err)
	}
	n := &Node{cfg: cfg, gen: gen, done: make(chan struct{})}
	wait := n.acquire(ctx)
	bg, stop := context.WithCancel(context.Background())
	n.stop = stop
	go n.run(bg, wait)
	return n, nil
}

// run keeps the lease until ctx ends.
func (n *Node) run(ctx context.Context, wait time.Duration) {
	defer close(n.done)
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.holding() {
			wait = n.renew(ctx)
		} else {
			wait = n.acquire(ctx)
		}
		t.Reset(wait)
	}
}

func (n *Node) holding() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lease != nil
}

// acquire tries to lease a worker ID and returns when to act next.
func (n *Node) acquire(ctx context.Context) time.Duration {
	wait, _ := n.tryAcquire(ctx)
	return wait
}

// tryAcquire is acquire that also says whether a lease was taken.
func (n *Node) tryAcquire(ctx context.Context) (time.Duration, bool) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RenewEvery)
	defer cancel()
	sent := n.cfg.Clock.Now()
	l, err := n.cfg.Store.Acquire(ctx, AcquireRequest{
		Holder: n.cfg.Holder, MinWorker: n.cfg.Workers.First, MaxWorker: n.cfg.Workers.Last, TTL: n.cfg.TTL, Margin: n.cfg.Margin,
	})
	got := n.cfg.Clock.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		if n.lastErr == nil || errors.Is(err, ErrAllHeld) != errors.Is(n.lastErr, ErrAllHeld) {
			n.cfg.Logger.Warn("snowflake: no worker id leased; serving no snowflake ids, retrying", "every", n.cfg.RenewEvery, "err", err)
		}
		n.lastErr = err
		return n.cfg.RenewEvery, false
	}
	n.acquisitions++
	n.lease = &l
	n.cfg.Logger.Info("snowflake: worker id leased", "worker_id", l.Worker, "epoch", l.Epoch, "ttl", n.cfg.TTL)
	return n.installLocked(l, sent, got), true
}

// renew renews the lease held and returns when to act next.
func (n *Node) renew(ctx context.Context) time.Duration {
	n.mu.Lock()
	held := *n.lease
	ended := !n.cfg.Clock.Now().Before(n.localExpiry.Add(-n.cfg.Margin))
	n.mu.Unlock()
	if ended {
		return n.restart(ctx, held)
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RenewEvery)
	defer cancel()
	sent := n.cfg.Clock.Now()
	l, err := n.cfg.Store.Renew(ctx, held, n.cfg.TTL, n.cfg.Margin)
	got := n.cfg.Clock.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case errors.Is(err, ErrLeaseLost):
		return n.lostLocked(held, err)
	case err != nil:
		n.renewFails++
		n.lastErr = err
		n.cfg.Logger.Warn("snowflake: lease renewal failed; serving until the window ends", "worker_id", held.Worker,
			"window_left", n.localExpiry.Sub(got)-n.cfg.Margin, "err", err)
		return n.cfg.RenewEvery / 2
	}
	n.renewals++
	n.lease = &l
	return n.installLocked(l, sent, got)
}

// lostLocked forgets a lease found taken over, and returns when to lease
// another.
func (n *Node) lostLocked(held Lease, err error) time.Duration {
	n.gen.Revoke()
	n.lease, n.lastErr = nil, err
	n.lost++
	n.cfg.Logger.Error("snowflake: worker lease lost to another instance; leasing another", "worker_id", held.Worker, "epoch", held.Epoch)
	return 0
}

// restart ends a lease whose window ended unrenewed (the database was
// away): it is not extended, so that every window is one epoch and a break
// shows. It is released, recording the last millisecond used, and a new
// lease is taken at once, under a new epoch that starts after it; until
// then requests get ErrLeaseExpired. A lease taken over meanwhile is lost,
// as a renewal would find.
func (n *Node) restart(ctx context.Context, held Lease) time.Duration {
	rctx, cancel := context.WithTimeout(ctx, n.cfg.RenewEvery)
	err := n.cfg.Store.Release(rctx, held, n.gen.Stats().LastMillis)
	cancel()
	if err != nil {
		n.mu.Lock()
		defer n.mu.Unlock()
		if errors.Is(err, ErrLeaseLost) {
			return n.lostLocked(held, err)
		}
		n.renewFails++
		n.lastErr = err
		n.cfg.Logger.Warn("snowflake: lease window ended unrenewed; serving no snowflake ids until the database answers", "worker_id", held.Worker, "err", err)
		return n.cfg.RenewEvery / 2
	}
	n.cfg.Logger.Warn("snowflake: lease window ended unrenewed; released, leasing again under a new epoch", "worker_id", held.Worker, "epoch", held.Epoch)
	wait, ok := n.tryAcquire(ctx)
	if !ok {
		// No new lease, and the old one is released: nothing is held.
		n.mu.Lock()
		n.gen.Revoke()
		n.lease = nil
		n.mu.Unlock()
	}
	return wait
}

// installLocked hands the lease's window to the generator, and suspends the
// generator while the clocks differ by more than the margin.
// It returns when to renew next.
func (n *Node) installLocked(l Lease, sent, got time.Time) time.Duration {
	mid := sent.Add(got.Sub(sent) / 2)
	n.offset = time.Duration(l.DBTime-mid.UnixMilli()) * time.Millisecond
	n.localExpiry = sent.Add(n.cfg.TTL)
	n.lastErr = nil
	margin := n.cfg.Margin.Milliseconds()
	if err := n.gen.Install(Window{
		Worker: l.Worker, Epoch: l.Epoch,
		Start: l.Start, End: l.Expires - margin,
		Deadline: sent.Add(n.cfg.TTL - n.cfg.Margin),
	}); err != nil {
		// A store bug: a worker ID outside the layout. Issue nothing, and
		// let the lease expire.
		n.gen.Revoke()
		n.lease = nil
		n.lastErr = err
		n.cfg.Logger.Error("snowflake: lease refused", "err", err)
		return n.cfg.RenewEvery
	}
	// The offset is known to within half the round trip: refuse only when
	// the clocks certainly differ by more than the margin, so that a slow
	// database does not pass for a wrong clock.
	if n.offset.Abs()-got.Sub(sent)/2 > n.cfg.Margin {
		err := fmt.Errorf("%w: the database's clock is %v ahead of this instance's, the margin is %v", ErrClockSkew, n.offset, n.cfg.Margin)
		n.gen.Suspend(err)
		n.lastErr = err
		n.cfg.Logger.Error("snowflake: clock skew; serving no snowflake ids until it is within the margin", "offset", n.offset, "margin", n.cfg.Margin)
		return n.resyncLocked(got.Sub(sent))
	}
	n.gen.Suspend(nil)
	return n.cfg.RenewEvery
}

// resyncLocked handles a clock that differs from the database's: when the
// host's wall clock agrees with the database's (it was stepped right after
// this clock was anchored), the clock reads the wall clock again and the
// lease is renewed at once to measure again. The generator's time floor
// keeps a clock moved back from reusing a millisecond. It returns when to
// renew.
func (n *Node) resyncLocked(rtt time.Duration) time.Duration {
	c, ok := n.cfg.Clock.(*MonotonicClock)
	if !ok {
		return n.cfg.RenewEvery
	}
	// Only a clock that differs from the wall clock by more than the margin
	// is taken again: no renewal loop at the edge of the margin.
	wallAhead := time.Since(c.Now())
	if wallAhead.Abs() <= n.cfg.Margin || (n.offset-wallAhead).Abs()-rtt/2 > n.cfg.Margin {
		return n.cfg.RenewEvery
	}
	moved := c.Reanchor()
	n.cfg.Logger.Warn("snowflake: the wall clock agrees with the database's; clock taken from it again", "moved", moved)
	return 0
}

// Next returns one ID.
func (n *Node) Next(ctx context.Context) (int64, error) {
	id, err := n.gen.Next(ctx)
	if err != nil {
		n.alarm(err)
	}
	return id, err
}

// NextN returns n increasing IDs.
func (n *Node) NextN(ctx context.Context, count int) ([]int64, error) {
	ids, err := n.gen.NextN(ctx, count)
	if err != nil {
		n.alarm(err)
	}
	return ids, err
}

// alarm logs a clock that went backwards beyond the longest wait, once a
// second at most: an operator must look at the clock.
func (n *Node) alarm(err error) {
	if !errors.Is(err, ErrClockBackwards) {
		return
	}
	now := time.Now()
	n.mu.Lock()
	due := now.Sub(n.lastAlarm) >= time.Second
	if due {
		n.lastAlarm = now
	}
	n.mu.Unlock()
	if due {
		n.cfg.Logger.Error("snowflake: clock went backwards beyond the longest wait; refusing ids rather than risking a duplicate", "err", err)
	}
}

// Layout returns the node's layout.
func (n *Node) Layout() Layout { return n.cfg.Layout }

// Close stops renewing and releases the worker ID, recording the last
// millisecond used as its time floor. No ID is issued after Close begins.
func (n *Node) Close(ctx context.Context) error {
	n.stop()
	<-n.done
	floor := n.gen.Revoke()
	n.mu.Lock()
	l := n.lease
	n.lease = nil
	n.mu.Unlock()
	if l == nil {
		return nil
	}
	if err := n.cfg.Store.Release(ctx, *l, floor); err != nil {
		return fmt.Errorf("release snowflake worker id %d: %w", l.Worker, err)
	}
	n.cfg.Logger.Info("snowflake: worker id released", "worker_id", l.Worker, "epoch", l.Epoch)
	return nil
}

// Stats is a snapshot of a Node.
type Stats struct {
	GeneratorStats
	Layout Layout
	Holder string
	// Worker and Epoch are the lease held; -1 and 0 when none.
	Worker, Epoch int64
	// LeaseRemaining is the time left before the lease expires, by the
	// clock; zero when none is held.
	LeaseRemaining time.Duration
	// WindowRemaining is how long IDs can still be issued without a
	// renewal: the time left before the window ends (a margin before the
	// lease expires), by the clock; zero when no window is held. While the
	// database is away it counts down to the first refusal.
	WindowRemaining time.Duration
	// ClockOffset is the database's clock minus this instance's, measured
	// at the last acquisition or renewal.
	ClockOffset time.Duration
	// Serving is nil when an ID can be issued now, else why not.
	Serving                                       error
	Acquisitions, Renewals, RenewFailures, Losses int64
	LastError                                     error
}

// Stats returns a snapshot.
func (n *Node) Stats() Stats {
	s := Stats{GeneratorStats: n.gen.Stats(), Layout: n.cfg.Layout, Holder: n.cfg.Holder, Worker: -1, Serving: n.gen.Ready()}
	now := n.cfg.Clock.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lease != nil {
		s.Worker, s.Epoch = n.lease.Worker, n.lease.Epoch
		s.LeaseRemaining = max(n.localExpiry.Sub(now), 0)
	}
	if w := s.Window; s.Held {
		// The window ends at its deadline or after its last millisecond,
		// whichever comes first (see Generator.Next).
		byEnd := time.UnixMilli(w.End + 1).Sub(now)
		s.WindowRemaining = max(min(w.Deadline.Sub(now), byEnd), 0)
	}
	s.ClockOffset = n.offset
	s.Acquisitions, s.Renewals, s.RenewFailures, s.Losses = n.acquisitions, n.renewals, n.renewFails, n.lost
	s.LastError = n.lastErr
	return s
}
