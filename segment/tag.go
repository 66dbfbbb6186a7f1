package segment

import (
	"errors"
	"fmt"
	"time"

	"github.com/idmint/idmint/wire/tagname"
)

// ValidateTag reports whether name is a valid tag: 1 to 64 characters of
// letters, digits, '_', '.', ':' and '-', starting with a letter or digit.
// Its error wraps ErrInvalidTag and quotes at most 80 bytes of name.
func ValidateTag(name string) error {
	if !tagname.Valid(name) {
		return fmt.Errorf("%w: %q: want 1-64 of [A-Za-z0-9_.:-], starting with a letter or digit", ErrInvalidTag, tagname.Truncate(name, 80))
	}
	return nil
}

// maxUnknown bounds the cache of forgotten tags. When it is full, expired
// entries go; if none has expired, a new tag is not remembered (Check keeps
// made-up names from the source anyway): cycling names cannot flush it.
const maxUnknown = 10_000

// forgotten is a tag without a buffer, remembered briefly: unknown to the
// source, or never loaded because the source could not be reached.
// Keeping no buffer for them means made-up tags, asked for during an outage
// or not, cannot pile up buffers.
type forgotten struct {
	until   time.Time
	unknown bool
	cause   error // why the first load failed, when not unknown
}

// keptGrants bounds tagState.grants: a buffer holds at most its current,
// its next and one late range, and a dropped buffer's last one may still
// go back.
const keptGrants = 4

// grantedAsk is an ask and the last ID of the range it was granted:
// Close gives back a range's tail with its ask.
type grantedAsk struct {
	ask  Ask
	last int64
}

// tagState is all a Set keeps for one tag, in one place: whether the tag
// is served (it has a buffer), forgotten for a while (see forgotten) or
// neither, its unsettled asks, its recent grants, its floor and its
// gaps. The pieces change together through its methods, so that no two
// of them can disagree about the tag; each method is written beside the
// concern it serves: the tag's life here, its unsettled asks, floor and
// settled gaps in load.go, the asks of its grants, its gaps and the asks
// left at Close in giveback.go.
//
// A tagState has no lock of its own: Set.mu protects every field, and
// every method is called with mu held, for writing except in the readers
// bufferLocked, gapsLocked and askOfLocked. Those accept a nil
// tagState (a tag never asked for), as a tag with nothing.
type tagState struct {
	// buf is the tag's buffer while the tag is served: set by serveLocked,
	// cleared by forgetLocked. nil before the tag's first request.
	buf *Buffer
	// gone, set only while buf is nil, is why the tag has no buffer for a
	// while (until gone.until): unknown to the source, or never loaded.
	gone *forgotten
	// pending holds the tag's unsettled asks, oldest first, at most
	// maxPending.
	pending []*Ask
	// grants holds the asks of the tag's last keptGrants ranges,
	// newest last.
	grants []grantedAsk
	// floor is the highest ID granted in the tag's ranges here: the Floor
	// of its next asks and of its next buffer, so that a rolled-back
	// source raises its high-water mark back to it. It never goes down.
	floor int64
	// gaps counts the IDs abandoned outside the tag's buffer: the unused
	// ranges of dropped buffers, and ranges found only after the tag moved
	// past them. Stats adds them to the buffer's Abandoned.
	gaps int64
}

// bufferLocked returns the tag's buffer, nil when it is not served.
func (t *tagState) bufferLocked() *Buffer {
	if t == nil {
		return nil
	}
	return t.buf
}

// gapsLocked returns the IDs abandoned outside the tag's buffer.
func (t *tagState) gapsLocked() int64 {
	if t == nil {
		return 0
	}
	return t.gaps
}

// idleLocked reports whether the state holds nothing worth keeping, so that
// the tag's entry can go.
func (t *tagState) idleLocked() bool {
	return t.buf == nil && t.gone == nil && len(t.pending) == 0 && t.floor == 0 && t.gaps == 0
}

// serveLocked makes b the tag's buffer. The tag must not be forgotten (see
// rememberedLocked, which clears an expired marker).
func (t *tagState) serveLocked(b *Buffer) {
	t.buf = b
}

// forgetLocked drops the tag's buffer b and remembers f (nil: nothing),
// and reports whether it did: not when b is no longer the tag's buffer.
func (t *tagState) forgetLocked(b *Buffer, f *forgotten) bool {
	if t.buf != b {
		return false
	}
	t.buf, t.gone = nil, f
	return true
}

// rememberedLocked returns why the tag is forgotten at now, false when it
// is not (or no longer: an expired marker is cleared, and cleared is
// reported so that the caller can count it).
func (t *tagState) rememberedLocked(now time.Time) (f forgotten, ok, cleared bool) {
	if t.gone == nil {
		return forgotten{}, false, false
	}
	if !now.Before(t.gone.until) {
		t.gone = nil
		return forgotten{}, false, true
	}
	return *t.gone, true, false
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
// because the source is unreachable, and shapes the error.
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
