package segment

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

	"github.com/google/uuid"

	"github.com/idmint/idmint/internal/tagname"
)

// Granter grants ranges to the tags of a Set, idempotently by request ID:
// the allocator's wraps its Store, the client's the /v1/segments endpoints
// of idmint instances. Its errors are classified with Classify (see
// ErrNotFound, ErrAlreadyGranted, ErrAmbiguous, ErrNotHeld, ErrRefused); an
// error of no class means nothing was granted, and the request is sent
// again after a pause.
type Granter interface {
	// Grant asks for a range for req. Sent again with the same req.ID it
	// grants nothing new: it answers the range granted before (or
	// ErrAlreadyGranted, to look it up).
	Grant(ctx context.Context, req Request) (Grant, error)
	// Lookup returns the range committed for req.ID, with Recovered set, or
	// ErrNotFound when nothing is committed for it (yet).
	Lookup(ctx context.Context, req Request) (Grant, error)
	// GiveBack returns r, the unused tail of the range granted to req, and
	// reports whether the granter took it back: only when nobody was
	// granted anything after it. false is no error; the IDs stay a gap.
	GiveBack(ctx context.Context, req Request, r Range) (bool, error)
}

// Request is one grant request of a Set's tag. Its ID is chosen before
// the first attempt, and every retry sends the same one (so does a later
// load that resumes it), so that a granter grants it at most once.
type Request struct {
	ID uuid.UUID
	// Key is a secret chosen with ID when SetConfig.HolderKeys is set (32
	// random bytes in unpadded base64url): it proves to the granter that
	// the range is this Set's on a retry and at the give-back. Empty
	// otherwise.
	Key string
	Tag string
	// Size is the size the tag's buffer asked for; 0 asks for the tag's
	// step.
	Size int64
	// Floor is the highest ID granted to the tag here (0: none): a granter
	// whose high-water mark went below it (the database went back in time)
	// raises it to Floor and grants above.
	Floor int64
	// Since is when the load that chose the request began.
	Since time.Time
}

// Classify returns err marked as kind, one of ErrNotFound,
// ErrAlreadyGranted, ErrAmbiguous, ErrNotHeld and ErrRefused: it reads as
// err, and errors.Is finds both kind and what err wraps.
func Classify(kind, err error) error {
	if err == nil {
		return kind
	}
	return &classified{kind: kind, err: err}
}

type classified struct{ kind, err error }

func (c *classified) Error() string   { return c.err.Error() }
func (c *classified) Unwrap() []error { return []error{c.err, c.kind} }

// ValidateTag reports whether name is a valid tag: 1 to 64 characters of
// letters, digits, '_', '.', ':' and '-', starting with a letter or digit.
// Its error wraps ErrInvalidTag and quotes at most 80 bytes of name.
func ValidateTag(name string) error {
	if !tagname.Valid(name) {
		return fmt.Errorf("%w: %q: want 1-64 of [A-Za-z0-9_.:-], starting with a letter or digit", ErrInvalidTag, tagname.Truncate(name, 80))
	}
	return nil
}

// SetConfig configures a Set. Zero fields take the defaults named.
type SetConfig struct {
	Granter Granter
	// Buffer holds the settings of every tag's buffer; Tag, Loader, Floor,
	// Logger and Now are set by the Set.
	Buffer Config
	// Check, if set, is asked about a valid tag that has no buffer yet,
	// before one is made: an error (one wrapping ErrUnknownTag, for a tag
	// known not to exist) is the caller's answer.
	Check func(ctx context.Context, tag string) error
	// HolderKeys gives every request a secret Key (see Request.Key).
	HolderKeys bool
	// UnknownTTL is how long a tag the granter does not know is remembered
	// as unknown, answered from memory (default 5s).
	UnknownTTL time.Duration
	// ResumeWithin is the age past which an unsettled request is abandoned
	// (logged) instead of resumed (0: never): a granter that forgets
	// request IDs after a while could grant it anew.
	ResumeWithin time.Duration
	// RetryMin and RetryMax bound the pause between attempts of one load
	// (defaults 20ms and 1s), with full jitter.
	RetryMin, RetryMax time.Duration
	Logger             *slog.Logger
	Now                func() time.Time
	// Jitter returns a random duration in [0, d); default math/rand/v2.
	Jitter func(d time.Duration) time.Duration
}

func (c *SetConfig) setDefaults() {
	if c.UnknownTTL <= 0 {
		c.UnknownTTL = 5 * time.Second
	}
	if c.RetryMin <= 0 {
		c.RetryMin = 20 * time.Millisecond
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = max(time.Second, c.RetryMin)
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
// entries go; if none has expired, a new tag is not remembered (Check keeps
// made-up names from the granter anyway): cycling names cannot flush it.
const maxUnknown = 10_000

// Set hands out the IDs of many tags, each from its own double Buffer fed
// by one Granter. It owns what a tag's buffers share across their lives:
// the lock-free index of the buffers, the tags found unknown, the highest
// ID granted (the floor), the unsettled requests and the gaps. Both the
// allocator (over its store) and the client (over the range API) are a
// Set. It is safe for concurrent use.
type Set struct {
	cfg SetConfig

	mu sync.RWMutex // protects tags (and every tagState in it), nForgotten and closed
	// tags holds the state of each tag asked for here (see tagState).
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
	hot        atomic.Pointer[Index]
	misses     atomic.Int64
	publishing atomic.Bool
}

// NewSet returns a Set over cfg.Granter. It starts no goroutine until a
// tag is first asked for.
func NewSet(cfg SetConfig) *Set {
	cfg.setDefaults()
	return &Set{cfg: cfg, tags: map[string]*tagState{}}
}

// Index returns the lock-free index of the served buffers, for an owner's
// fast path: Find, then Buffer.TryTake, and the Set's Next when either
// declines. It may be nil.
func (s *Set) Index() *Index { return s.hot.Load() }

// Next returns the next ID of tag.
func (s *Set) Next(ctx context.Context, tag string) (int64, error) {
	b, err := s.buffer(ctx, tag)
	if err != nil {
		return 0, err
	}
	id, err := b.Take(ctx)
	if err != nil {
		return 0, s.takeFailed(tag, b, err)
	}
	return id, nil
}

// NextN appends n IDs of tag to dst, increasing, n >= 1. On error it also
// returns the IDs it took before the error (maybe none): they are the
// caller's, unique like any other, and handing them out is better than
// leaving them a gap; a caller that cannot use fewer than n drops them (a
// gap, never a duplicate).
func (s *Set) NextN(ctx context.Context, tag string, n int, dst []int64) ([]int64, error) {
	if n < 1 {
		return dst, fmt.Errorf("count %d: must be at least 1", n)
	}
	b, err := s.buffer(ctx, tag)
	if err != nil {
		return dst, err
	}
	ids, err := b.TakeN(ctx, n, dst)
	if err != nil {
		return ids, s.takeFailed(tag, b, err)
	}
	return ids, nil
}

// NextRanges takes n IDs of tag and appends them to dst as increasing
// ranges of consecutive IDs (usually one, two when the IDs span a range
// switch). On error it also returns the ranges taken before the error, as
// NextN does.
func (s *Set) NextRanges(ctx context.Context, tag string, n int, dst []Range) ([]Range, error) {
	if n < 1 {
		return dst, fmt.Errorf("count %d: must be at least 1", n)
	}
	b, err := s.buffer(ctx, tag)
	if err != nil {
		return dst, err
	}
	out, err := b.TakeRanges(ctx, n, dst)
	if err != nil {
		return out, s.takeFailed(tag, b, err)
	}
	return out, nil
}

// Ready waits until tag has an ID to hand out, loading its first range.
func (s *Set) Ready(ctx context.Context, tag string) error {
	b, err := s.buffer(ctx, tag)
	if err != nil {
		return err
	}
	if err := b.Ready(ctx); err != nil {
		return s.takeFailed(tag, b, err)
	}
	return nil
}

// buffer returns tag's buffer, creating it on first use if the tag is
// valid and Check does not refuse it.
func (s *Set) buffer(ctx context.Context, tag string) (*Buffer, error) {
	if b := s.hot.Load().Find(tag); b != nil {
		return b, nil
	}
	s.mu.RLock()
	b := s.tags[tag].bufferLocked()
	closed := s.closed
	s.mu.RUnlock()
	if b != nil {
		s.missed()
		return b, nil
	}
	if closed {
		return nil, ErrClosed
	}
	if err := s.check(ctx, tag); err != nil {
		return nil, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if b := s.tags[tag].bufferLocked(); b != nil {
		return b, nil
	}
	if err := s.rememberedLocked(tag); err != nil {
		return nil, err
	}
	bc := s.cfg.Buffer
	bc.Tag = tag
	bc.Loader = LoaderFunc(func(ctx context.Context, size int64) (Grant, error) {
		return s.load(ctx, tag, size)
	})
	bc.Logger = s.cfg.Logger
	bc.Now = s.cfg.Now
	// A tag's buffer may be new while the tag is not (a forgotten buffer):
	// it starts from the highest ID the tag was ever granted here.
	t := s.stateLocked(tag)
	bc.Floor = t.floor
	b = New(bc)
	t.serveLocked(b)
	return b, nil
}

// check returns an error for a tag that is invalid or, by Check, not to
// be served.
func (s *Set) check(ctx context.Context, tag string) error {
	if err := ValidateTag(tag); err != nil {
		return err
	}
	if s.cfg.Check == nil {
		return nil
	}
	return s.cfg.Check(ctx, tag)
}

// missed counts a lookup that found its buffer under the lock, and
// publishes a new copy of the buffers once the misses reach the size of the
// current copy.
func (s *Set) missed() {
	n := s.misses.Add(1)
	if n < int64(s.hot.Load().Len()) {
		return
	}
	if !s.publishing.CompareAndSwap(false, true) {
		return // another caller publishes
	}
	defer s.publishing.Store(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishLocked()
}

// publishLocked replaces the lock-free copy of the buffers.
func (s *Set) publishLocked() {
	s.misses.Store(0)
	if s.closed {
		s.hot.Store(nil)
		return
	}
	s.hot.Store(NewIndex(s.buffersLocked()))
}

// stateLocked returns tag's state, adding an empty one for a tag new here;
// mu must be held for writing.
func (s *Set) stateLocked(tag string) *tagState {
	t := s.tags[tag]
	if t == nil {
		t = &tagState{}
		s.tags[tag] = t
	}
	return t
}

// dropIfIdleLocked removes tag's state when it holds nothing any more, so
// that made-up tags leave nothing behind.
func (s *Set) dropIfIdleLocked(tag string, t *tagState) {
	if t.idleLocked() {
		delete(s.tags, tag)
	}
}

// buffersLocked returns a new map of the buffers of the tags served.
func (s *Set) buffersLocked() map[string]*Buffer {
	bufs := make(map[string]*Buffer, len(s.tags))
	for tag, t := range s.tags {
		if t.buf != nil {
			bufs[tag] = t.buf
		}
	}
	return bufs
}

// rememberedLocked returns the error of a forgotten tag, nil when the tag
// is not (or no longer) forgotten; mu must be held for writing.
func (s *Set) rememberedLocked(tag string) error {
	t := s.tags[tag]
	if t == nil {
		return nil
	}
	now := s.cfg.Now()
	f, ok, cleared := t.rememberedLocked(now)
	if cleared {
		s.nForgotten--
		s.dropIfIdleLocked(tag, t)
	}
	switch {
	case !ok:
		return nil
	case f.unknown:
		return fmt.Errorf("%w: %q", ErrUnknownTag, tag)
	}
	return &UnavailableError{Tag: tag, RetryAfter: f.until.Sub(now), Err: f.cause}
}

// takeFailed forgets the buffer of a tag found unknown, or never loaded
// because the granter is unreachable, and shapes the error.
func (s *Set) takeFailed(tag string, b *Buffer, err error) error {
	switch {
	case errors.Is(err, ErrUnknownTag):
		s.forget(tag, b, forgotten{until: s.cfg.Now().Add(s.cfg.UnknownTTL), unknown: true})
		return fmt.Errorf("%w: %q", ErrUnknownTag, tag)
	case errors.Is(err, ErrUnavailable) && b.Stats().Loads == 0:
		// Never loaded, so the buffer holds nothing worth keeping: no
		// range, no anti-rollback floor (the Set keeps that). It is
		// answered "unavailable" from memory for one backoff, which also
		// bounds this line to one per tag per backoff.
		if s.forget(tag, b, forgotten{until: s.cfg.Now().Add(s.coldRetry()), cause: err}) {
			s.cfg.Logger.Warn("first segment load failed", "biz_tag", tag, "err", err)
		}
		return err
	case errors.Is(err, ErrClosed):
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return ErrClosed
		}
		// Forgotten under this request by another one's takeFailed.
		if e := s.rememberedLocked(tag); e != nil {
			return e
		}
		return fmt.Errorf("%w: tag %q: its buffer was just dropped; retry", ErrUnavailable, tag)
	}
	return err
}

// coldRetry is the buffers' first backoff after a failed load.
func (s *Set) coldRetry() time.Duration {
	if d := s.cfg.Buffer.MinBackoff; d > 0 {
		return d
	}
	return 100 * time.Millisecond
}

// forget drops tag's buffer b (if it is still the tag's) and remembers f,
// and reports whether it did. The buffer is closed in the background: Close
// may wait for a load still in flight, and the request that forgets it must
// not wait too.
func (s *Set) forget(tag string, b *Buffer, f forgotten) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tags[tag]
	if s.closed || t.bufferLocked() != b {
		return false // Close (or an earlier forget) owns it
	}
	if s.nForgotten >= maxUnknown {
		now := s.cfg.Now()
		for other, st := range s.tags {
			if _, _, cleared := st.rememberedLocked(now); cleared {
				s.nForgotten--
				s.dropIfIdleLocked(other, st)
			}
		}
	}
	var remember *forgotten
	if s.nForgotten < maxUnknown {
		remember = &f
		s.nForgotten++
	}
	t.forgetLocked(b, remember)
	if s.hot.Load().Find(tag) == b {
		s.publishLocked()
	}
	// A load still in flight may bring a range back to the closed buffer:
	// nobody serves it.
	s.closing.Go(func() { s.abandon(tag, b.Close()) })
	return true
}

// Stats returns a snapshot of every served tag, sorted by tag.
func (s *Set) Stats() []Stats {
	s.mu.RLock()
	bufs := make([]*Buffer, 0, len(s.tags))
	for _, t := range s.tags {
		if t.buf != nil {
			bufs = append(bufs, t.buf)
		}
	}
	s.mu.RUnlock()
	out := make([]Stats, 0, len(bufs))
	for _, b := range bufs {
		out = append(out, s.stats(b))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out
}

// TagStats returns a snapshot of one tag's buffer. It never loads a range:
// a tag that Check accepts but that has no buffer here yet has stats with
// only Tag set. It returns an error wrapping ErrUnknownTag for a tag
// found unknown.
func (s *Set) TagStats(ctx context.Context, tag string) (Stats, error) {
	s.mu.RLock()
	b := s.tags[tag].bufferLocked()
	s.mu.RUnlock()
	if b != nil {
		return s.stats(b), nil
	}
	if err := s.check(ctx, tag); err != nil {
		return Stats{}, err
	}
	s.mu.Lock()
	err := s.rememberedLocked(tag)
	s.mu.Unlock()
	return Stats{Tag: tag}, err
}

// stats returns b's stats with the IDs the Set abandoned for its tag.
func (s *Set) stats(b *Buffer) Stats {
	st := b.Stats()
	s.mu.RLock()
	st.Abandoned += s.tags[st.Tag].gapsLocked()
	s.mu.RUnlock()
	return st
}

// Close stops every tag's background loads and waits for them. IDs granted
// but not handed out are abandoned (a gap), except the unused tail of each
// tag's newest range, which goes back to the granter when nobody was
// granted anything after it (see closeBuffer). Requests still unsettled
// are looked up once, to log what they were granted. Next fails with
// ErrClosed after. ctx bounds the give-backs and lookups.
func (s *Set) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.publishLocked()
	bufs := s.buffersLocked()
	s.mu.Unlock()

	// Tags close side by side: each may wait for a load in flight.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs = []error{}
	)
	for tag, b := range bufs {
		wg.Go(func() {
			if err := s.closeBuffer(ctx, tag, b); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	s.closing.Wait()
	s.settlePending(ctx)
	return errors.Join(append(errs, ctx.Err())...)
}

// closeBuffer closes one tag's buffer and gives back what it can of the
// unused IDs, newest first; the rest is logged as abandoned. Each range
// given back leaves the granter's high-water mark just below it, at the
// end of the unused range before it when the two touch: that one goes back
// next.
func (s *Set) closeBuffer(ctx context.Context, tag string, b *Buffer) error {
	unused := b.Close()
	var err error
	for len(unused) > 0 {
		r := unused[len(unused)-1]
		req, ok := s.requestOf(tag, r.Last)
		if !ok {
			break
		}
		log := s.cfg.Logger.With("biz_tag", tag, "first", r.First, "last", r.Last, "count", r.Len())
		var back bool
		if back, err = s.cfg.Granter.GiveBack(ctx, req, r); err != nil {
			log.Warn("could not give back unused ids; they stay a gap", "err", err)
			err = fmt.Errorf("give back %q [%d, %d]: %w", tag, r.First, r.Last, err)
			break
		}
		if !back {
			log.Info("did not give back unused ids: the tag was granted more since; they stay a gap")
			break
		}
		log.Info("gave back unused ids: the tag's next range starts at them")
		b.GaveBack(r)
		unused = unused[:len(unused)-1]
		if len(unused) == 0 || unused[len(unused)-1].Last+1 != r.First {
			break
		}
	}
	for _, r := range unused {
		s.logAbandoned(tag, r)
	}
	return err
}

// requestOf returns the request that was granted the range ending at last.
func (s *Set) requestOf(tag string, last int64) (Request, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tags[tag].requestOfLocked(last)
}

// settlePending looks up, once, every request still unsettled at Close: a
// range committed for it is never served, and is logged and counted as
// abandoned; one not found (or not reachable) is logged as an abandoned
// request, whose range the granter's log has if it committed after all.
func (s *Set) settlePending(ctx context.Context) {
	s.mu.Lock()
	pending := make(map[string][]*Request)
	for tag, t := range s.tags {
		if p := t.takePendingLocked(); len(p) > 0 {
			pending[tag] = p
		}
	}
	s.mu.Unlock()
	for tag, reqs := range pending {
		for _, req := range reqs {
			g, err := s.cfg.Granter.Lookup(ctx, *req)
			if err != nil {
				s.abandonedRequest(*req, fmt.Sprintf("unsettled at shutdown (%v)", err))
				continue
			}
			s.abandon(tag, []Range{g.Range})
		}
	}
}

// abandon logs and counts unused ranges of a buffer that nobody serves any
// more.
func (s *Set) abandon(tag string, unused []Range) {
	var n int64
	for _, r := range unused {
		n += r.Len()
		s.logAbandoned(tag, r)
	}
	if n == 0 {
		return // a made-up tag's buffer, for one, leaves nothing to count
	}
	s.mu.Lock()
	s.stateLocked(tag).abandonedLocked(n)
	s.mu.Unlock()
}

// logAbandoned logs granted IDs that will never be handed out.
func (s *Set) logAbandoned(tag string, r Range) {
	s.cfg.Logger.Warn("ABANDONED ids: granted but never handed out (a gap)",
		"biz_tag", tag, "first", r.First, "last", r.Last, "count", r.Len())
}

// abandonedRequest logs an unsettled request given up for good. Its range,
// if it committed, is unknown here: the granter's log has it.
func (s *Set) abandonedRequest(req Request, why string) {
	s.cfg.Logger.Warn("ABANDONED request: "+why+"; if it committed, its range is a gap (the segment log has it)",
		"biz_tag", req.Tag, "request_id", req.ID.String())
}

// Floor returns the highest ID granted to tag's ranges here (0: none).
func (s *Set) Floor(tag string) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if t := s.tags[tag]; t != nil {
		return t.floor
	}
	return 0
}

// Closed reports whether Close was called.
func (s *Set) Closed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}
