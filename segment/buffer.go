package segment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Buffer. Zero fields take the defaults named.
type Config struct {
	Tag    string
	Loader Loader
	// Period is the target life of one range (default 15m).
	Period time.Duration
	// Threshold is the used fraction of the current range that starts the
	// background fetch of the next one (default 0.1, as in Leaf).
	Threshold float64
	// Runway is how long the buffer must carry callers without a load at
	// the recent peak rate: each range asked for covers it (within the
	// tag's max_step), and the next range is fetched while the current one
	// still holds it. 0 keeps only Period and Threshold. A tag's own
	// runway (Grant.Runway) overrides it.
	Runway time.Duration
	// PeakHalfLife is how fast the remembered peak rate decays towards
	// the rate seen now (default DefaultPeakHalfLife): a burst keeps the
	// ranges large for a while after it.
	PeakHalfLife time.Duration
	// WaitTimeout bounds how long a caller waits for a range to arrive when
	// both ranges are empty (default DefaultWaitTimeout). Waiting callers
	// are served from the ranges that arrive in turn, first come first
	// served; a caller whose turn has not come when a range arrives waits
	// WaitTimeout again for the next one.
	WaitTimeout time.Duration
	// MaxWait bounds a caller's whole wait while ranges keep arriving but
	// go to the callers queued before it (default 4×WaitTimeout, never
	// below WaitTimeout).
	MaxWait time.Duration
	// LoadTimeout bounds one background load (default 10s).
	LoadTimeout time.Duration
	// AdaptTimeout, when set, gives the bound of each load, with
	// LoadTimeout as its floor: a load from a database far away may take
	// longer than a nearby one (the allocator follows the round trip).
	AdaptTimeout func(floor time.Duration) time.Duration
	// ColdWait, when set, gives the bound of a caller's wait, with
	// WaitTimeout as its floor, while the buffer has never loaded a range:
	// a cold tag's first load from a database far away (a new connection,
	// the statement prepared) may take longer than WaitTimeout, and no
	// caller has been served from the tag yet to fail fast for. MaxWait is
	// raised to it then. Once a range has arrived, WaitTimeout holds.
	ColdWait func(floor time.Duration) time.Duration
	// MinBackoff and MaxBackoff bound the pause after a failed load
	// (defaults 100ms and 5s); during it callers with nothing to serve fail
	// fast instead of piling onto a failing database.
	MinBackoff, MaxBackoff time.Duration
	// Floor is the highest ID already known to be granted for the tag; the
	// buffer refuses any range that starts at or below it.
	Floor int64
	// OnLoad, if set, is called after every load with its latency and its
	// error (nil when the range was installed), so that metrics can keep a
	// latency histogram. It runs on the load's goroutine, outside the
	// buffer's lock, and must not block.
	OnLoad func(tag string, latency time.Duration, err error)
	Logger *slog.Logger
	Now    func() time.Time
}

func (c *Config) setDefaults() {
	if c.Period <= 0 {
		c.Period = 15 * time.Minute
	}
	if c.Threshold <= 0 || c.Threshold >= 1 {
		c.Threshold = 0.1
	}
	if c.PeakHalfLife <= 0 {
		c.PeakHalfLife = DefaultPeakHalfLife
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 4 * c.WaitTimeout
	}
	c.MaxWait = max(c.MaxWait, c.WaitTimeout)
	if c.LoadTimeout <= 0 {
		c.LoadTimeout = 10 * time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(5*time.Second, c.MinBackoff)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// DefaultWaitTimeout is Config.WaitTimeout's default.
const DefaultWaitTimeout = 2 * time.Second

// Buffer is one tag's double buffer: the range being served and the next one.
// It is safe for concurrent use.
type Buffer struct {
	cfg Config

	// cur is the range being served; read without the lock on the fast path.
	cur atomic.Pointer[span]
	// loadAt is the first ID of cur whose take must start a load: cur's
	// threshold while no next range is ready and no load is in flight (0
	// while there is no cur), noLoad otherwise, loadDue once a TryTake
	// crossed it. The lock holder sets it (setWantLocked); TryTake, which
	// takes no lock, only moves it to loadDue.
	loadAt atomic.Int64
	// retryAt holds back new loads after a failure, in nanoseconds on the
	// buffer's clock (see clock).
	retryAt atomic.Int64
	epoch   time.Time // the origin of clock

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // background loads

	mu        sync.Mutex // protects the fields below and switching cur
	next      *span
	loading   bool
	loadDone  chan struct{} // closed when the load in flight ends
	lastErr   error
	backoff   time.Duration
	closed    bool
	highest   int64 // highest ID ever granted: the anti-rollback floor
	step      int64 // size of the last granted range
	minStep   int64
	maxStep   int64
	rateAt    time.Time     // start of the rate window: when the last load started
	rateIDs   int64         // IDs issued at rateAt
	starved   bool          // a caller waited on an empty buffer since rateAt
	runway    time.Duration // the runway in force: the tag's, else Config.Runway
	peak      peakRate
	prevAt    time.Time // start of the window before, for Stats' rate
	prevIDs   int64     // IDs issued at prevAt
	retired   int64     // IDs issued from ranges no longer current
	abandoned int64
	givenBack int64
	late      []Range // granted after Close began; reported by Close
	// waiters are the callers waiting for the next range, first come
	// first: a range that arrives serves them before anyone else can take
	// from it (serveWaitersLocked).
	waiters  []*waiter
	counters counters
}

// waiter is a caller queued for IDs from the next ranges. The lock holder
// that serves it sets r and served, and takes it off Buffer.waiters.
type waiter struct {
	n      int64 // IDs wanted; 0 waits only for an ID to be there (Ready)
	r      Range // what a refill handed it, once served
	served bool
	queued bool // in Buffer.waiters
}

type counters struct {
	loads, failures, refused, recovered, repaired int64
	lastLatency, totalLatency                     time.Duration
	lastLoadAt                                    time.Time
	lastRequestID                                 string
}

// New returns a buffer for one tag. It loads nothing until the first Take.
func New(cfg Config) *Buffer {
	cfg.setDefaults()
	b := &Buffer{cfg: cfg, highest: cfg.Floor, epoch: cfg.Now(), runway: cfg.Runway}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.loadAt.Store(0) // nothing to serve yet: any take starts a load
	return b
}

// clock returns the time since the buffer was made. With time.Now it reads
// the monotonic clock, so a wall-clock step (NTP) cannot stretch a backoff
// to hours.
func (b *Buffer) clock() int64 { return int64(b.cfg.Now().Sub(b.epoch)) }

// Tag returns the tag the buffer serves.
func (b *Buffer) Tag() string { return b.cfg.Tag }

// Special values of Buffer.loadAt.
const (
	noLoad = math.MaxInt64
	// loadDue: a TryTake crossed the threshold; TryTake takes nothing
	// until a Take has started the load.
	loadDue = -1
)

// Take returns the next ID. It only waits when both ranges are empty, and
// then for its turn on the ranges that arrive: at most WaitTimeout without
// one, MaxWait in all.
func (b *Buffer) Take(ctx context.Context) (int64, error) {
	if s := b.cur.Load(); s != nil {
		if id, ok := s.take(); ok {
			b.maybePrefetch(ctx, s, id)
			return id, nil
		}
	}
	r, err := b.takeSlow(ctx, 1)
	return r.First, err
}

// TryTake is Take's fast path: the next ID from the range being served,
// without waiting, loading or starting a load. With ok=false it took
// nothing: the range is used up or not loaded, or a load is due; the caller
// then calls Take. It makes no call, so that it is inlined into the
// caller (TestIntendedInlining keeps it so): the take that crosses the
// threshold only marks the load due, and the next caller's Take starts it.
func (b *Buffer) TryTake() (id int64, ok bool) {
	if s, at := b.cur.Load(), b.loadAt.Load(); s != nil && at != loadDue {
		id = s.next.Add(1) - 1
		// The swap fails if the lock holder changed loadAt meanwhile: its
		// value is the newer truth. (If a load started and failed in
		// between, the same value is back, and due is right again.)
		if ok = id >= s.First && id <= s.Last; ok && id >= at {
			b.loadAt.CompareAndSwap(at, loadDue)
		}
	}
	return
}

// TakeN appends up to n IDs to dst and returns it. It returns an error, and
// the IDs taken so far, when the buffer runs dry before n.
func (b *Buffer) TakeN(ctx context.Context, n int, dst []int64) ([]int64, error) {
	for left := int64(n); left > 0; {
		var r Range
		var ok bool
		if s := b.cur.Load(); s != nil {
			if r, ok = s.takeN(left); ok {
				b.maybePrefetch(ctx, s, r.Last)
			}
		}
		if !ok {
			var err error
			if r, err = b.takeSlow(ctx, left); err != nil {
				return dst, err
			}
		}
		for id := r.First; ; id++ {
			dst = append(dst, id)
			if id == r.Last {
				break
			}
		}
		left -= r.Len()
	}
	return dst, nil
}

// TakeRanges takes up to n IDs, as TakeN does, and appends them to dst as
// ranges, consecutive IDs as one range, so that a batch costs a few atomic
// adds whatever its size. It returns an error, and the ranges taken so far,
// when the buffer runs dry before n.
func (b *Buffer) TakeRanges(ctx context.Context, n int, dst []Range) ([]Range, error) {
	for left := int64(n); left > 0; {
		s := b.cur.Load()
		r, ok := Range{}, false
		if s != nil {
			r, ok = s.takeN(left)
		}
		if ok {
			b.maybePrefetch(ctx, s, r.Last)
		} else {
			var err error
			if r, err = b.takeSlow(ctx, left); err != nil {
				return dst, err
			}
		}
		if k := len(dst) - 1; k >= 0 && dst[k].Last+1 == r.First {
			dst[k].Last = r.Last
		} else {
			dst = append(dst, r)
		}
		left -= r.Len()
	}
	return dst, nil
}

// Ready waits, as Take does, until the buffer has an ID to hand out,
// loading the first range if needed. It takes no ID.
func (b *Buffer) Ready(ctx context.Context) error {
	_, err := b.takeSlow(ctx, 0)
	return err
}

// maybePrefetch starts the next load once id crosses the threshold, on
// behalf of the take whose context is ctx. It is small enough to be
// inlined into Take: the call happens once per range, and on every take
// only while a failed load backs off.
func (b *Buffer) maybePrefetch(ctx context.Context, s *span, id int64) {
	if id >= s.prefetchAt && b.loadAt.Load() != noLoad {
		b.prefetch(ctx)
	}
}

func (b *Buffer) prefetch(ctx context.Context) {
	if b.clock() < b.retryAt.Load() {
		return
	}
	b.mu.Lock()
	b.startLoadLocked(ctx)
	b.mu.Unlock()
}

// takeSlow switches to the next range or waits for a load: for its turn on
// the ranges that arrive, at most WaitTimeout without one and MaxWait in
// all. n == 0 only waits for an ID to be available.
func (b *Buffer) takeSlow(ctx context.Context, n int64) (Range, error) {
	var (
		w           *waiter // queued for the next ranges once it must wait
		wait, limit *time.Timer
		seen        int64         // ranges granted when it last looked
		waitFor     time.Duration // wait's duration
	)
	defer func() {
		if wait != nil {
			wait.Stop()
			limit.Stop()
		}
	}()
	for {
		r, done, loads, err := b.turn(ctx, &w, n)
		if done == nil {
			return r, err
		}
		switch {
		case wait == nil:
			waitFor = b.cfg.WaitTimeout
			if loads == 0 && b.cfg.ColdWait != nil {
				waitFor = b.cfg.ColdWait(waitFor)
			}
			wait = time.NewTimer(waitFor)
			limit = time.NewTimer(max(b.cfg.MaxWait, waitFor))
		case loads != seen:
			// Ranges arrived and went to the callers queued before this
			// one: it is nearer its turn, and waits for the next range.
			waitFor = b.cfg.WaitTimeout
			wait.Reset(waitFor)
		}
		seen = loads
		select {
		case <-done:
		case <-wait.C:
			return b.giveUp(w, fmt.Errorf("%w: tag %q: no segment within %v", ErrUnavailable, b.cfg.Tag, waitFor))
		case <-limit.C:
			return b.giveUp(w, fmt.Errorf("%w: tag %q: no ids within %v: the ranges that arrived went to callers queued before", ErrUnavailable, b.cfg.Tag, b.cfg.MaxWait))
		case <-ctx.Done():
			return b.giveUp(w, fmt.Errorf("%w: tag %q: %w", ErrUnavailable, b.cfg.Tag, ctx.Err()))
		}
	}
}

// turn is one look of takeSlow under the lock. It returns what *wp was
// served, or takes from the ranges, or else queues *wp (made on first use)
// and returns the channel of the load to wait for and the count of ranges
// granted so far. With a nil channel the wait is over: the range or the
// error is the caller's.
func (b *Buffer) turn(ctx context.Context, wp **waiter, n int64) (Range, <-chan struct{}, int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w := *wp; w != nil && w.served {
		return w.r, nil, 0, nil
	}
	r, done, err := b.tryLocked(ctx, n)
	if done == nil {
		b.dequeueLocked(*wp)
		return r, nil, 0, err
	}
	if *wp == nil {
		*wp = &waiter{n: n, queued: true}
		b.waiters = append(b.waiters, *wp)
	}
	b.starved = true
	return Range{}, done, b.counters.loads, nil
}

// tryLocked takes n IDs or, when there are none, starts a load unless one is
// in flight and returns the channel that the load closes. With a nil channel
// it returns the range or the error.
func (b *Buffer) tryLocked(ctx context.Context, n int64) (Range, <-chan struct{}, error) {
	if b.closed {
		return Range{}, nil, ErrClosed
	}
	if r, ok := b.takeLocked(ctx, n); ok {
		return r, nil, nil
	}
	if !b.loading {
		if err := b.failFastLocked(); err != nil {
			return Range{}, nil, err
		}
		b.startLoadLocked(ctx)
	} else if b.lastErr != nil {
		// The last load failed and its retry is in flight: during an
		// outage, waiting on it would make every request slow. The
		// caller that started the retry waits; the others fail fast.
		return Range{}, nil, &UnavailableError{Tag: b.cfg.Tag, RetryAfter: max(b.backoff, b.cfg.MinBackoff), Err: b.lastErr}
	}
	return Range{}, b.loadDone, nil
}

// giveUp ends w's wait with err, unless a refill served w meanwhile: those
// IDs are taken for it, and handing them out beats leaving them a gap.
func (b *Buffer) giveUp(w *waiter, err error) (Range, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.served {
		return w.r, nil
	}
	b.dequeueLocked(w)
	return Range{}, err
}

// dequeueLocked takes w, if queued, off the waiters.
func (b *Buffer) dequeueLocked(w *waiter) {
	if w == nil || !w.queued {
		return
	}
	if i := slices.Index(b.waiters, w); i >= 0 {
		b.waiters = slices.Delete(b.waiters, i, i+1)
	}
	w.queued = false
}

// serveWaitersLocked hands the waiters, first come first, their IDs from
// sp, a range not yet published: nobody else can take from it yet. It stops
// at the first waiter sp cannot serve, which keeps its turn.
func (b *Buffer) serveWaitersLocked(sp *span) {
	served := 0
	for _, w := range b.waiters {
		if w.n == 0 {
			if sp.used() >= sp.Len() {
				break
			}
		} else {
			r, ok := sp.takeN(w.n)
			if !ok {
				break
			}
			w.r = r
		}
		w.served, w.queued = true, false
		served++
	}
	b.waiters = slices.Delete(b.waiters, 0, served)
}

// takeLocked takes from the current range, switching to the next when the
// current one is used up; a load it starts is on behalf of ctx's caller.
func (b *Buffer) takeLocked(ctx context.Context, n int64) (Range, bool) {
	for {
		s := b.cur.Load()
		if n == 0 && s != nil && s.used() < s.Len() {
			return Range{}, true // Ready: something to hand out
		}
		if s != nil && n > 0 {
			if r, ok := s.takeN(n); ok {
				if r.Last >= s.prefetchAt && b.loadAt.Load() != noLoad &&
					b.clock() >= b.retryAt.Load() {
					b.startLoadLocked(ctx)
				}
				return r, true
			}
		}
		if b.next == nil {
			return Range{}, false
		}
		b.switchLocked()
	}
}

// setWantLocked says whether crossing cur's threshold must start a load;
// either way it ends a due load.
func (b *Buffer) setWantLocked(want bool) {
	switch s := b.cur.Load(); {
	case !want:
		b.loadAt.Store(noLoad)
	case s == nil:
		b.loadAt.Store(0)
	default:
		b.loadAt.Store(s.prefetchAt)
	}
}

// switchLocked retires the current range (used up) and serves the next.
func (b *Buffer) switchLocked() {
	// Before cur retires: issuedLocked would count it twice after.
	b.keepRunwayLocked(b.next)
	if s := b.cur.Load(); s != nil {
		b.retired += s.Len()
	}
	b.cur.Store(b.next)
	b.next = nil
	b.setWantLocked(!b.loading)
}

// failFastLocked returns the error to give callers while a failed load's
// backoff runs, so that they do not wait on a database that just failed.
func (b *Buffer) failFastLocked() error {
	if b.lastErr == nil {
		return nil
	}
	if wait := time.Duration(b.retryAt.Load() - b.clock()); wait > 0 {
		return &UnavailableError{Tag: b.cfg.Tag, RetryAfter: wait, Err: b.lastErr}
	}
	return nil
}

// startLoadLocked starts a background load unless one is in flight, a next
// range is ready, or the buffer is closed. The load runs on behalf of the
// caller whose take started it, when there is one (trigger; the buffer's
// own context when none): its context's values (a trace) go with the load,
// its cancellation and deadline do not; the buffer's Close cancels it.
func (b *Buffer) startLoadLocked(trigger context.Context) {
	if b.closed || b.loading || b.next != nil {
		b.setWantLocked(false) // a load found due that need not be
		return
	}
	size := b.nextSizeLocked()
	b.loading = true
	b.loadDone = make(chan struct{})
	b.setWantLocked(false)
	b.wg.Add(1)
	go b.load(trigger, size, b.loadDone)
}

// nextSizeLocked applies the step policy to the rate seen since the last
// load started, the last load's latency, and whether callers waited.
func (b *Buffer) nextSizeLocked() int64 {
	now := b.cfg.Now()
	issued := b.issuedLocked()
	size := int64(0) // the tag's own step, for the first load
	peak := b.peakLocked(now, issued)
	if b.step > 0 {
		p := StepPolicy{Min: b.minStep, Max: b.maxStep, Period: b.cfg.Period, Runway: b.runway}
		size = p.Next(b.step, Sample{
			Used:    issued - b.rateIDs,
			Elapsed: now.Sub(b.rateAt),
			Latency: b.counters.lastLatency,
			Starved: b.starved,
			Peak:    peak,
		})
	}
	b.prevAt, b.prevIDs = b.rateAt, b.rateIDs
	b.rateAt, b.rateIDs = now, issued
	b.starved = false
	return size
}

func (b *Buffer) issuedLocked() int64 {
	n := b.retired
	if s := b.cur.Load(); s != nil {
		n += s.used()
	}
	return n
}

// load runs one Loader call and installs its result. The call has the
// values of trigger's context (b.ctx: none but the buffer's), and ends
// with the buffer's.
func (b *Buffer) load(trigger context.Context, size int64, done chan struct{}) {
	defer b.wg.Done()
	timeout := b.cfg.LoadTimeout
	if b.cfg.AdaptTimeout != nil {
		timeout = b.cfg.AdaptTimeout(timeout)
	}
	parent := b.ctx
	if trigger != b.ctx {
		var stop context.CancelFunc
		parent, stop = context.WithCancel(context.WithoutCancel(trigger))
		defer context.AfterFunc(b.ctx, stop)()
		defer stop()
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	start := b.cfg.Now()
	g, err := b.cfg.Loader.Load(ctx, size)
	cancel()
	latency := b.cfg.Now().Sub(start)
	err = b.install(g, err, latency, done)
	if b.cfg.OnLoad != nil {
		b.cfg.OnLoad(b.cfg.Tag, latency, err)
	}
}

// install records the outcome of a load and closes done. It returns err, or
// the reason the granted range was refused.
func (b *Buffer) install(g Grant, err error, latency time.Duration, done chan struct{}) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer close(done)
	b.loading = false
	b.counters.lastLatency = latency
	if err == nil {
		err = b.checkLocked(g)
	}
	if err != nil {
		b.failedLocked(err)
		return err
	}
	b.grantedLocked(g, latency)
	return nil
}

// checkLocked refuses malformed ranges and ranges at or below the highest ID
// ever granted: serving them could repeat IDs.
func (b *Buffer) checkLocked(g Grant) error {
	if g.Last < g.First || g.First < 1 {
		return fmt.Errorf("loader returned an invalid range [%d, %d]", g.First, g.Last)
	}
	if g.First <= b.highest {
		return fmt.Errorf("%w: range [%d, %d] (request %s), highest granted %d", ErrRolledBack, g.First, g.Last, g.RequestID, b.highest)
	}
	return nil
}

func (b *Buffer) failedLocked(err error) {
	b.counters.failures++
	b.lastErr = err
	b.backoff = min(max(2*b.backoff, b.cfg.MinBackoff), b.cfg.MaxBackoff)
	b.retryAt.Store(b.clock() + int64(b.backoff))
	b.setWantLocked(!b.closed)
	switch {
	case errors.Is(err, ErrRolledBack):
		// Refused here (checkLocked), or by a Loader that returns
		// ErrRolledBack (a store that refuses instead of repairing):
		// either way an alarm, never a range served.
		b.counters.refused++
		b.cfg.Logger.Error("REFUSED segment: it starts at or below an id already granted to this instance; the database went back in time (restored backup or lagging replica?); bump the tag past the old high-water mark",
			"biz_tag", b.cfg.Tag, "highest_granted", b.highest, "err", err, "retry_in", b.backoff)
	case errors.Is(err, context.Canceled):
	case b.counters.loads == 0:
		// A first load: the tag may not exist at all (a made-up name),
		// and the owner knows better whether this is worth a warning.
		b.cfg.Logger.Debug("first segment load failed", "biz_tag", b.cfg.Tag, "err", err)
	default:
		b.cfg.Logger.Warn("segment load failed", "biz_tag", b.cfg.Tag, "err", err, "retry_in", b.backoff)
	}
}

func (b *Buffer) grantedLocked(g Grant, latency time.Duration) {
	b.highest = g.Last
	b.step = g.Len()
	b.minStep, b.maxStep = g.MinStep, g.MaxStep
	b.runway = b.cfg.Runway
	if g.Runway > 0 {
		b.runway = g.Runway
	}
	b.lastErr, b.backoff = nil, 0
	b.retryAt.Store(0)
	c := &b.counters
	c.loads++
	c.totalLatency += latency
	c.lastLoadAt = b.cfg.Now()
	c.lastRequestID = g.RequestID
	if g.Recovered {
		c.recovered++
	}
	if g.Repaired {
		c.repaired++
	}
	if b.closed {
		// The load finished after Close began: nobody will serve this
		// range; Close reports it with the other unused ranges.
		b.late = append(b.late, g.Range)
		return
	}
	sp := newSpan(g.Range, b.cfg.Threshold)
	if cur := b.cur.Load(); cur == nil || cur.used() >= cur.Len() {
		// The callers waiting for this range come first; the lock-free
		// takers get what they leave once it is published.
		b.serveWaitersLocked(sp)
		b.next = sp
		b.switchLocked()
		if sp.next.Load() > sp.prefetchAt {
			// The waiters took the threshold, or all of it: the next
			// load is due now, as it would be after a locked take.
			b.startLoadLocked(b.ctx)
		}
		return
	}
	b.next = sp
	b.setWantLocked(false)
}

// closeWait bounds how long Close waits for a load in flight to end by
// itself before cancelling it. A load that already committed then comes back
// with its range, which Close reports as unused (and an allocator may give
// back) instead of losing it as a silent gap.
const closeWait = 2 * time.Second

// Close stops background loads, waits for them, and returns the ranges that
// were granted but never handed out: the current range's tail, the next
// range and a range whose load finished during Close, oldest first. They
// count as abandoned until the owner gives them back (GaveBack); logging them
// is the owner's job, as only it knows which. Take fails with ErrClosed
// afterwards.
//
// Close waits min(2 s, LoadTimeout) for a load in flight, then cancels it
// and waits for its Loader to return (see Loader): a reply that lands
// after that cancel is reported with the rest, never served. So every ID of
// every range the buffer received is, when Close returns, handed out or
// among the ranges it returns (counted abandoned until given back).
func (b *Buffer) Close() []Range {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.setWantLocked(false)
	var unused []Range
	if s := b.cur.Load(); s != nil {
		if tail, ok := s.exhaust(); ok {
			unused = append(unused, tail)
			// exhaust made the tail look used; it was not issued.
			b.retired -= tail.Len()
		}
	}
	if b.next != nil {
		unused = append(unused, b.next.Range)
	}
	var inFlight chan struct{}
	if b.loading {
		inFlight = b.loadDone
	}
	b.mu.Unlock()

	if inFlight != nil {
		select {
		case <-inFlight:
		case <-time.After(min(closeWait, b.cfg.LoadTimeout)):
		}
	}
	b.cancel()
	b.wg.Wait()

	b.mu.Lock()
	defer b.mu.Unlock()
	// Ranges are granted in increasing order, so late ones come last.
	unused = append(unused, b.late...)
	b.late = nil
	for _, r := range unused {
		b.abandoned += r.Len()
	}
	return unused
}

// GaveBack records that the owner returned r, unused ranges from Close, to
// the store: those IDs are no gap after all. It counts at most the IDs Close
// left abandoned, and nothing for a range that is not one of IDs.
func (b *Buffer) GaveBack(r Range) {
	if r.First < 1 || r.Last < r.First {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(r.Len(), b.abandoned)
	b.abandoned -= n
	b.givenBack += n
}
