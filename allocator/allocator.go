package allocator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idmint/idmint/segment"
)

// Config configures an Allocator. Zero fields take the defaults named.
type Config struct {
	Store Store
	// Instance names this process in the segment log (default "idmint").
	Instance string
	// Segment holds the buffer settings every tag uses: Period, Threshold,
	// WaitTimeout, MaxWait, LoadTimeout, MinBackoff, MaxBackoff, OnLoad. Tag,
	// Loader, Logger and Now are set by the allocator.
	Segment segment.Config
	// AttemptTimeout bounds one store call within a load (default 3s), so a
	// hung connection leaves time to retry on another. With RoundTrip set it
	// is the floor: a call gets RoundTrip.Timeout(AttemptTimeout).
	AttemptTimeout time.Duration
	// RoundTrip, when set, is the store's measured round trip (see
	// Postgres.RoundTrip): the attempt timeout follows it, so a database a
	// WAN away is given the time its round trips take.
	RoundTrip *RoundTrip
	// RetryMin and RetryMax bound the pause between attempts of one load
	// (defaults 20ms and 1s), with full jitter.
	RetryMin, RetryMax time.Duration
	// UnknownTTL is how long an unknown tag is remembered as unknown, so that
	// requests for bogus tags cannot hammer the store (default 5s).
	UnknownTTL time.Duration
	// LogRetention is the age past which the store's segment-log rows are
	// pruned (0: never). An unsettled request older than half of it is
	// abandoned rather than resumed: its row may be gone.
	LogRetention time.Duration
	// CatalogInterval is how often, at most, the store's list of tags is
	// read again for a tag that has no buffer (default 500ms): a tag created
	// anywhere is served within it, and made-up tags cost at most one read
	// per interval. It applies when the Store is a TagLister.
	CatalogInterval time.Duration
	Logger          *slog.Logger
	Now             func() time.Time
	// Jitter returns a random duration in [0, d); default math/rand/v2.
	Jitter func(d time.Duration) time.Duration
}

func (c *Config) setDefaults() {
	if c.Instance == "" {
		c.Instance = "idmint"
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = 3 * time.Second
	}
	if c.RetryMin <= 0 {
		c.RetryMin = 20 * time.Millisecond
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = max(time.Second, c.RetryMin)
	}
	if c.UnknownTTL <= 0 {
		c.UnknownTTL = 5 * time.Second
	}
	if c.CatalogInterval <= 0 {
		c.CatalogInterval = 500 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Jitter == nil {
		c.Jitter = func(d time.Duration) time.Duration {
			if d <= 0 {
				return 0
			}
			return rand.N(d)
		}
	}
}

// maxUnknown bounds the cache of forgotten tags. When it is full, expired
// entries go; if none has expired, a new tag is not remembered (the catalog
// keeps made-up names from the store anyway): cycling names cannot flush it.
const maxUnknown = 10_000

// forgotten is a tag without a buffer, remembered briefly: unknown to the
// store, or never loaded because the store could not be reached. Keeping no
// buffer for them means made-up tags, asked for during an outage or not,
// cannot pile up buffers.
type forgotten struct {
	until   time.Time
	unknown bool
	cause   error // why the first load failed, when not unknown
}

// Allocator hands out IDs for every tag of a Store. It is safe for
// concurrent use.
type Allocator struct {
	cfg Config

	mu sync.RWMutex // protects tags (and every tagState in it), nForgotten and closed
	// tags holds the state of each tag asked for here: its buffer or why
	// it has none, its unsettled requests, its floor and its gaps (see
	// tagState).
	tags map[string]*tagState
	// nForgotten counts the tags remembered as forgotten, at most
	// maxUnknown.
	nForgotten int
	closed     bool
	// closing tracks the buffers forget closes in the background; Close
	// waits for them.
	closing sync.WaitGroup

	// hot serves known tags without the lock: an immutable copy of the
	// tags' buffers, replaced (never modified) under mu. A tag missing from
	// it is looked up under mu; once those misses add up to the size of the
	// copy, the next one publishes a new copy, so a burst of new tags costs
	// amortised O(1) each, as in sync.Map. A forgotten buffer leaves the
	// copy at once; Close empties it.
	hot        atomic.Pointer[segment.Index]
	misses     atomic.Int64
	publishing atomic.Bool
	// catalog knows the store's tag names; nil when the Store is no
	// TagLister.
	catalog *catalog
}

// New returns an Allocator over cfg.Store. It starts no goroutine until a
// tag is first asked for.
func New(cfg Config) *Allocator {
	cfg.setDefaults()
	a := &Allocator{
		cfg:  cfg,
		tags: map[string]*tagState{},
	}
	if l, ok := cfg.Store.(TagLister); ok {
		a.catalog = &catalog{lister: l, interval: cfg.CatalogInterval, timeout: cfg.AttemptTimeout, now: cfg.Now}
	}
	return a
}

// Next returns the next ID for tag. For a warm tag it costs finding the
// tag's buffer and an atomic add: no lock, no allocation, no call.
func (a *Allocator) Next(ctx context.Context, tag string) (int64, error) {
	// Everything on the fast path is inlined (TestIntendedInlining), and
	// the slow path is a call of its own, so that the fast one spills no
	// registers for it.
	if b := a.hot.Load().Find(tag); b != nil {
		if id, ok := b.TryTake(); ok {
			return id, nil
		}
	}
	return a.nextSlow(ctx, tag)
}

// nextSlow is Next for a tag without a published buffer, or when
// Buffer.TryTake declines (segment used up, or a load to start).
func (a *Allocator) nextSlow(ctx context.Context, tag string) (int64, error) {
	b, err := a.buffer(ctx, tag)
	if err != nil {
		return 0, err
	}
	id, err := b.Take(ctx)
	if err != nil {
		return 0, a.takeFailed(tag, b, err)
	}
	return id, nil
}

// MaxN is the largest count NextN hands out in one call.
const MaxN = 1_000_000

// NextN returns n IDs for tag, increasing, 1 <= n <= MaxN. On error it also
// returns the IDs it took before the error (maybe none): they are the
// caller's, and handing them out is better than leaving them a gap.
func (a *Allocator) NextN(ctx context.Context, tag string, n int) ([]int64, error) {
	if n < 1 || n > MaxN {
		return nil, fmt.Errorf("count %d: must be 1 to %d", n, MaxN)
	}
	b, err := a.buffer(ctx, tag)
	if err != nil {
		return nil, err
	}
	ids, err := b.TakeN(ctx, n, make([]int64, 0, n))
	if err != nil {
		return ids, a.takeFailed(tag, b, err)
	}
	return ids, nil
}

// NextRanges takes n IDs for tag and appends them to dst as increasing
// ranges of consecutive IDs (usually one, two when the IDs span a segment
// switch). On error it also returns the ranges taken before the error
// (maybe none): they are the caller's, as with NextN.
func (a *Allocator) NextRanges(ctx context.Context, tag string, n int, dst []segment.Range) ([]segment.Range, error) {
	if n < 1 || n > MaxN {
		return dst, fmt.Errorf("count %d: must be 1 to %d", n, MaxN)
	}
	b, err := a.buffer(ctx, tag)
	if err != nil {
		return dst, err
	}
	out, err := b.TakeRanges(ctx, n, dst)
	if err != nil {
		return out, a.takeFailed(tag, b, err)
	}
	return out, nil
}

// buffer returns tag's buffer, creating it on first use if the catalog
// knows the tag.
func (a *Allocator) buffer(ctx context.Context, tag string) (*segment.Buffer, error) {
	if b := a.hot.Load().Find(tag); b != nil {
		return b, nil
	}
	a.mu.RLock()
	b := a.tags[tag].bufferLocked()
	closed := a.closed
	a.mu.RUnlock()
	if b != nil {
		a.missed()
		return b, nil
	}
	if closed {
		return nil, ErrClosed
	}
	if err := a.check(ctx, tag); err != nil {
		return nil, err
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	if b := a.tags[tag].bufferLocked(); b != nil {
		return b, nil
	}
	if err := a.rememberedLocked(tag); err != nil {
		return nil, err
	}
	sc := a.cfg.Segment
	sc.Tag = tag
	sc.Loader = segment.LoaderFunc(func(ctx context.Context, size int64) (segment.Grant, error) {
		return a.load(ctx, tag, size)
	})
	sc.Logger = a.cfg.Logger
	sc.Now = a.cfg.Now
	if a.cfg.RoundTrip != nil {
		sc.AdaptTimeout = a.loadTimeout
	}
	// A tag's buffer may be new while the tag is not (a forgotten buffer):
	// it starts from the highest ID the tag was ever granted here.
	t := a.stateLocked(tag)
	sc.Floor = t.floor
	b = segment.New(sc)
	t.serveLocked(b)
	return b, nil
}

// missed counts a lookup that found its buffer under the lock, and
// publishes a new copy of the buffers once the misses reach the size of the
// current copy.
func (a *Allocator) missed() {
	n := a.misses.Add(1)
	if n < int64(a.hot.Load().Len()) {
		return
	}
	if !a.publishing.CompareAndSwap(false, true) {
		return // another caller publishes
	}
	defer a.publishing.Store(false)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.publishLocked()
}

// publishLocked replaces the lock-free copy of the buffers.
func (a *Allocator) publishLocked() {
	a.misses.Store(0)
	if a.closed {
		a.hot.Store(nil)
		return
	}
	a.hot.Store(segment.NewIndex(a.buffersLocked()))
}

// stateLocked returns tag's state, adding an empty one for a tag new here;
// mu must be held for writing.
func (a *Allocator) stateLocked(tag string) *tagState {
	t := a.tags[tag]
	if t == nil {
		t = &tagState{}
		a.tags[tag] = t
	}
	return t
}

// dropIfIdleLocked removes tag's state when it holds nothing any more, so
// that made-up tags leave nothing behind.
func (a *Allocator) dropIfIdleLocked(tag string, t *tagState) {
	if t.idleLocked() {
		delete(a.tags, tag)
	}
}

// buffersLocked returns a new map of the buffers of the tags served.
func (a *Allocator) buffersLocked() map[string]*segment.Buffer {
	bufs := make(map[string]*segment.Buffer, len(a.tags))
	for tag, t := range a.tags {
		if t.buf != nil {
			bufs[tag] = t.buf
		}
	}
	return bufs
}

// rememberedLocked returns the error of a forgotten tag, nil when the tag
// is not (or no longer) forgotten; mu must be held for writing.
func (a *Allocator) rememberedLocked(tag string) error {
	t := a.tags[tag]
	if t == nil {
		return nil
	}
	now := a.cfg.Now()
	f, ok, cleared := t.rememberedLocked(now)
	if cleared {
		a.nForgotten--
		a.dropIfIdleLocked(tag, t)
	}
	switch {
	case !ok:
		return nil
	case f.unknown:
		return fmt.Errorf("%w: %q", ErrUnknownTag, tag)
	}
	return &segment.UnavailableError{Tag: tag, RetryAfter: f.until.Sub(now), Err: f.cause}
}

// takeFailed forgets the buffer of a tag found unknown, or never loaded
// because the store is unreachable, and shapes the error.
func (a *Allocator) takeFailed(tag string, b *segment.Buffer, err error) error {
	switch {
	case errors.Is(err, ErrUnknownTag):
		a.forget(tag, b, forgotten{until: a.cfg.Now().Add(a.cfg.UnknownTTL), unknown: true})
		return fmt.Errorf("%w: %q", ErrUnknownTag, tag)
	case errors.Is(err, ErrUnavailable) && b.Stats().Loads == 0:
		// Never loaded, so the buffer holds nothing worth keeping: no
		// segment, no anti-rollback floor (the allocator keeps that).
		// It is answered "unavailable" from memory for one backoff, which
		// also bounds this line to one per tag per backoff.
		if a.forget(tag, b, forgotten{until: a.cfg.Now().Add(a.coldRetry()), cause: err}) {
			a.cfg.Logger.Warn("first segment load failed", "biz_tag", tag, "err", err)
		}
		return err
	case errors.Is(err, segment.ErrClosed):
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.closed {
			return ErrClosed
		}
		// Forgotten under this request by another one's takeFailed.
		if e := a.rememberedLocked(tag); e != nil {
			return e
		}
		return fmt.Errorf("%w: tag %q: its buffer was just dropped; retry", ErrUnavailable, tag)
	}
	return err
}

// coldRetry is the buffers' first backoff after a failed load.
func (a *Allocator) coldRetry() time.Duration {
	if d := a.cfg.Segment.MinBackoff; d > 0 {
		return d
	}
	return 100 * time.Millisecond
}

// forget drops tag's buffer b (if it is still the tag's) and remembers f,
// and reports whether it did. The buffer is closed in the background: Close
// may wait for a load still in flight, and the request that forgets it must
// not wait too.
func (a *Allocator) forget(tag string, b *segment.Buffer, f forgotten) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tags[tag]
	if a.closed || t.bufferLocked() != b {
		return false // Close (or an earlier forget) owns it
	}
	if a.nForgotten >= maxUnknown {
		now := a.cfg.Now()
		for other, s := range a.tags {
			if _, _, cleared := s.rememberedLocked(now); cleared {
				a.nForgotten--
				a.dropIfIdleLocked(other, s)
			}
		}
	}
	var remember *forgotten
	if a.nForgotten < maxUnknown {
		remember = &f
		a.nForgotten++
	}
	t.forgetLocked(b, remember)
	if a.hot.Load().Find(tag) == b {
		a.publishLocked()
	}
	// A load still in flight may bring a segment back to the closed buffer:
	// nobody serves it.
	a.closing.Go(func() { a.abandon(tag, b.Close()) })
	return true
}

// Stats returns a snapshot of every loaded tag, sorted by tag.
func (a *Allocator) Stats() []segment.Stats {
	a.mu.RLock()
	bufs := make([]*segment.Buffer, 0, len(a.tags))
	for _, t := range a.tags {
		if t.buf != nil {
			bufs = append(bufs, t.buf)
		}
	}
	a.mu.RUnlock()
	out := make([]segment.Stats, 0, len(bufs))
	for _, b := range bufs {
		out = append(out, a.stats(b))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out
}

// TagStats returns a snapshot of one tag's buffer. It never loads a
// segment: a tag that is known (see TagLister) but not loaded here yet has
// stats with only Tag set. It returns ErrUnknownTag for a tag the store
// does not know.
func (a *Allocator) TagStats(ctx context.Context, tag string) (segment.Stats, error) {
	a.mu.RLock()
	b := a.tags[tag].bufferLocked()
	a.mu.RUnlock()
	if b != nil {
		return a.stats(b), nil
	}
	if err := a.check(ctx, tag); err != nil {
		return segment.Stats{}, err
	}
	a.mu.Lock()
	err := a.rememberedLocked(tag)
	a.mu.Unlock()
	return segment.Stats{Tag: tag}, err
}

// check returns an error for a tag that is invalid or, by the catalog,
// unknown.
func (a *Allocator) check(ctx context.Context, tag string) error {
	if err := ValidateTag(tag); err != nil {
		return err
	}
	if a.catalog == nil {
		return nil
	}
	known, err := a.catalog.known(ctx, tag)
	if err != nil {
		return err
	}
	if !known {
		return fmt.Errorf("%w: %q", ErrUnknownTag, tag)
	}
	return nil
}

// stats returns b's stats with the IDs the allocator abandoned for its tag.
func (a *Allocator) stats(b *segment.Buffer) segment.Stats {
	st := b.Stats()
	a.mu.RLock()
	st.Abandoned += a.tags[st.Tag].gapsLocked()
	a.mu.RUnlock()
	return st
}

// Ping reports whether the store can be reached.
func (a *Allocator) Ping(ctx context.Context) error { return a.cfg.Store.Ping(ctx) }

// Close stops every tag's background loads and waits for them. IDs granted
// but not handed out are abandoned (a gap), except that a Store which is a
// Returner gets back the unused tail of each tag's newest segment when nobody
// allocated after it (see giveBack). Next fails with ErrClosed after. ctx
// bounds the give-backs.
func (a *Allocator) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.publishLocked()
	bufs := a.buffersLocked()
	a.mu.Unlock()

	// Tags close side by side: each may wait for a load in flight.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs = []error{}
	)
	for tag, b := range bufs {
		wg.Go(func() {
			if err := a.closeBuffer(ctx, tag, b); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	a.closing.Wait()
	a.settlePending(ctx)
	return errors.Join(append(errs, ctx.Err())...)
}

// settlePending looks up, once, every request still unsettled at Close: a
// segment committed for it is never served, and is logged and counted as
// abandoned; one not found (or not reachable) is logged as an abandoned
// request, whose segment the segment log has if it committed after all.
func (a *Allocator) settlePending(ctx context.Context) {
	a.mu.Lock()
	pending := make(map[string][]*pendingRequest)
	for tag, t := range a.tags {
		if p := t.takePendingLocked(); len(p) > 0 {
			pending[tag] = p
		}
	}
	a.mu.Unlock()
	for tag, reqs := range pending {
		for _, p := range reqs {
			seg, err := a.lookup(ctx, p.req.ID)
			if err != nil {
				a.mu.Lock()
				a.abandonedRequestLocked(p.req, fmt.Sprintf("unsettled at shutdown (%v)", err))
				a.mu.Unlock()
				continue
			}
			a.abandon(tag, []segment.Range{{First: seg.First, Last: seg.Last}})
		}
	}
}

// closeBuffer closes one tag's buffer and gives back what it can of the
// unused IDs; the rest is logged as abandoned.
func (a *Allocator) closeBuffer(ctx context.Context, tag string, b *segment.Buffer) error {
	unused := b.Close()
	var err error
	if returner, ok := a.cfg.Store.(Returner); ok && len(unused) > 0 {
		var back segment.Range
		if back, ok, err = a.giveBack(ctx, returner, tag, unused); ok {
			b.GaveBack(back)
			unused = leftOf(unused, back.First)
		}
	}
	for _, r := range unused {
		a.logAbandoned(tag, r)
	}
	return err
}

// leftOf returns the parts of ranges below first.
func leftOf(ranges []segment.Range, first int64) []segment.Range {
	var out []segment.Range
	for _, r := range ranges {
		if r.First >= first {
			break
		}
		r.Last = min(r.Last, first-1)
		out = append(out, r)
	}
	return out
}

// giveBack gives back the unused tail of the tag's newest segment, unused
// being the buffer's unused ranges oldest first, the newest last. The tail
// of the segment before it joins in when the two touch. The store only takes it back
// if max_id still ends it: then nobody else was granted an ID above its
// first, and this instance, closed, hands out none of it. Otherwise the IDs
// stay a gap.
func (a *Allocator) giveBack(ctx context.Context, returner Returner, tag string, unused []segment.Range) (back segment.Range, ok bool, err error) {
	r := unused[len(unused)-1]
	if n := len(unused); n > 1 && unused[n-2].Last+1 == r.First {
		r.First = unused[n-2].First
	}
	log := a.cfg.Logger.With("biz_tag", tag, "first", r.First, "last", r.Last, "count", r.Len())
	ok, err = returner.GiveBack(ctx, tag, r.First, r.Last)
	switch {
	case err != nil:
		log.Warn("could not give back unused ids; they stay a gap", "err", err)
		return segment.Range{}, false, err
	case ok:
		log.Info("gave back unused ids: the tag's next segment starts at them")
		return r, true, nil
	default:
		log.Info("did not give back unused ids: the tag was allocated since; they stay a gap")
		return segment.Range{}, false, nil
	}
}
