package segment

import (
	"context"
	"errors"
	"fmt"
)

// giveBack gives back what it can of the unused ranges of tag's closed
// buffer b, newest first; the rest is logged as abandoned (b counts it
// so until it is given back). Each range given back leaves the source's
// high-water mark just below it, at the end of the unused range before it
// when the two touch: that one goes back next. settled says that no ask
// of the tag can still be granted a range (see Set.Close): without it,
// nothing goes back.
func (s *Set) giveBack(ctx context.Context, tag string, b *Buffer, unused []Range, settled bool) error {
	if !settled && len(unused) > 0 {
		s.cfg.Logger.Info("did not give back unused ids: a request of the tag is unsettled and could still be granted a range above them; they stay a gap",
			"biz_tag", tag)
	}
	var err error
	for settled && len(unused) > 0 {
		r := unused[len(unused)-1]
		ask, ok := s.askOf(tag, r.Last)
		if !ok {
			break
		}
		log := s.cfg.Logger.With("biz_tag", tag, "first", r.First, "last", r.Last, "count", r.Len())
		var back bool
		if back, err = s.cfg.Source.GiveBack(ctx, ask, r); err != nil {
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

// askOf returns the ask that was granted the range ending at last.
func (s *Set) askOf(tag string, last int64) (Ask, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tags[tag].askOfLocked(last)
}

// askOfLocked returns the ask of the range that ends at last.
func (t *tagState) askOfLocked(last int64) (Ask, bool) {
	if t == nil {
		return Ask{}, false
	}
	for _, g := range t.grants {
		if g.last == last {
			return g.ask, true
		}
	}
	return Ask{}, false
}

// settlePending looks up, once, every ask still unsettled at Close: a
// range committed for it is never served, and is logged and counted as
// abandoned; one not found (or not reachable) is logged as an abandoned
// request, whose range the source's log has if it committed after all.
// It returns the tags left with such an ask: one may still be granted a
// range (a statement the source runs on after its caller stopped
// waiting), so their tails must not go back.
func (s *Set) settlePending(ctx context.Context) (unsettled map[string]bool) {
	s.mu.Lock()
	pending := make(map[string][]*Ask)
	for tag, t := range s.tags {
		if p := t.takePendingLocked(); len(p) > 0 {
			pending[tag] = p
		}
	}
	s.mu.Unlock()
	unsettled = make(map[string]bool)
	for tag, asks := range pending {
		for _, ask := range asks {
			g, err := s.cfg.Source.Lookup(ctx, *ask)
			if err != nil {
				s.abandonedRequest(*ask, fmt.Sprintf("unsettled at shutdown (%v)", err))
				if !errors.Is(err, ErrNotHeld) {
					unsettled[tag] = true
				}
				continue
			}
			s.abandon(tag, []Range{g.Range})
		}
	}
	return unsettled
}

// takePendingLocked takes every unsettled ask of the tag, oldest first.
func (t *tagState) takePendingLocked() []*Ask {
	p := t.pending
	t.pending = nil
	return p
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

// abandonedLocked counts n IDs of the tag that nobody serves any more.
func (t *tagState) abandonedLocked(n int64) {
	t.gaps += n
}

// logAbandoned logs granted IDs that will never be handed out.
func (s *Set) logAbandoned(tag string, r Range) {
	s.cfg.Logger.Warn("ABANDONED ids: granted but never handed out (a gap)",
		"biz_tag", tag, "first", r.First, "last", r.Last, "count", r.Len())
}
