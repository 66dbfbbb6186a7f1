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
)

// SetConfig configures a Set. Zero fields take the defaults named.
type SetConfig struct {
	Source Source
	// Buffer holds the settings of every tag's buffer; Tag, Loader, Floor,
	// Logger and Now are set by the Set.
	Buffer Config
	// Check, if set, is asked about a valid tag that has no buffer yet,
	// before one is made: an error (one wrapping ErrUnknownTag, for a tag
	// known not to exist) is the caller's answer.
	Check func(ctx context.Context, tag string) error
	// HolderKeys gives every ask a secret Key (see Ask.Key).
	HolderKeys bool
	// UnknownTTL is how long a tag the source does not know is remembered
	// as unknown, answered from memory (default 5s).
	UnknownTTL time.Duration
	// ResumeWithin is the age past which an unsettled ask is abandoned
	// (logged) instead of resumed (0: never): a source that forgets
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

// Set hands out the IDs of many tags, each from its own double Buffer fed
// by one Source. It owns what a tag's buffers share across their lives:
// the lock-free index of the buffers, the tags found unknown, the highest
// ID granted (the floor), the unsettled asks and the gaps. Both the
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

// NewSet returns a Set over cfg.Source. It starts no goroutine until a
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
// tag's newest range, which goes back to the source when nobody was
// granted anything after it (see giveBack). Asks still unsettled are
// looked up once, to log what they were granted. Next fails with
// ErrClosed after. ctx bounds the give-backs and lookups.
//
// The give-backs come last: every buffer closes first, the served ones and
// those forget is closing, so that no load of the Set is in flight, and
// then every unsettled ask is looked up. A tail given back while a load of
// its tag could still be granted a range would be lost: that load's ask
// carries the tag's floor, at or above the tail, so the source raises its
// high-water mark back over the tail and grants above it, and the tail's
// IDs, given back, are never granted again nor counted abandoned.
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

	unused := closeBuffers(bufs)
	s.closing.Wait()
	unsettled := s.settlePending(ctx)
	// Tags give back side by side.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs = []error{}
	)
	for tag, b := range bufs {
		wg.Go(func() {
			if err := s.giveBack(ctx, tag, b, unused[tag], !unsettled[tag]); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(append(errs, ctx.Err())...)
}

// closeBuffers closes bufs side by side, as each may wait for a load in
// flight, and returns the unused ranges of each tag (see Buffer.Close).
func closeBuffers(bufs map[string]*Buffer) map[string][]Range {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		unused = make(map[string][]Range, len(bufs))
	)
	for tag, b := range bufs {
		wg.Go(func() {
			r := b.Close()
			mu.Lock()
			unused[tag] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	return unused
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
