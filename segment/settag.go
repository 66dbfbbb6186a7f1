package segment

import "time"

// forgotten is a tag without a buffer, remembered briefly: unknown to the
// granter, or never loaded because the granter could not be reached.
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

// grantedRequest is a request and the last ID of the range it was
// granted: Close gives back a range's tail with its request.
type grantedRequest struct {
	req  Request
	last int64
}

// tagState is all a Set keeps for one tag, in one place: whether the tag
// is served (it has a buffer), forgotten for a while (see forgotten) or
// neither, its unsettled requests, its recent grants, its floor and its
// gaps. The pieces change together through the methods below, so that no
// two of them can disagree about the tag.
//
// A tagState has no lock of its own: Set.mu protects every field, and
// every method is called with mu held, for writing except in the readers
// bufferLocked, gapsLocked and requestOfLocked. Those accept a nil
// tagState (a tag never asked for), as a tag with nothing.
type tagState struct {
	// buf is the tag's buffer while the tag is served: set by serveLocked,
	// cleared by forgetLocked. nil before the tag's first request.
	buf *Buffer
	// gone, set only while buf is nil, is why the tag has no buffer for a
	// while (until gone.until): unknown to the granter, or never loaded.
	gone *forgotten
	// pending holds the tag's unsettled requests, oldest first, at most
	// maxPending.
	pending []*Request
	// grants holds the requests of the tag's last keptGrants ranges,
	// newest last.
	grants []grantedRequest
	// floor is the highest ID granted in the tag's ranges here: the Floor
	// of its next requests and of its next buffer, so that a rolled-back
	// granter raises its high-water mark back to it. It never goes down.
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

// requestOfLocked returns the request of the range that ends at last.
func (t *tagState) requestOfLocked(last int64) (Request, bool) {
	if t == nil {
		return Request{}, false
	}
	for _, g := range t.grants {
		if g.last == last {
			return g.req, true
		}
	}
	return Request{}, false
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

// grantedLocked raises the floor past r, a range granted to the tag for
// req, and keeps req for r's give-back. A range at or below the floor
// (from a granter that ignores Floor) leaves the floor as it is: the
// buffer refuses that range.
func (t *tagState) grantedLocked(req Request, r Range) {
	if r.First > t.floor {
		t.floor = r.Last
	}
	t.grants = append(t.grants, grantedRequest{req: req, last: r.Last})
	if len(t.grants) > keptGrants {
		t.grants = t.grants[len(t.grants)-keptGrants:]
	}
}

// settledGapLocked reports whether r, found by lookup, ends at or below
// the floor: then the tag moved past it, no buffer can serve it, and it is
// counted as abandoned. (A range that overlaps the floor is no gap: the
// buffer refuses it as a rollback.)
func (t *tagState) settledGapLocked(r Range) bool {
	if r.Last > t.floor {
		return false
	}
	t.gaps += r.Len()
	return true
}

// abandonedLocked counts n IDs of the tag that nobody serves any more.
func (t *tagState) abandonedLocked(n int64) {
	t.gaps += n
}

// oldestPendingLocked takes the oldest unsettled request out of the tag's
// pending ones, nil when there is none. Taken out, no second load can
// resume it at the same time.
func (t *tagState) oldestPendingLocked() *Request {
	if len(t.pending) == 0 {
		return nil
	}
	p := t.pending[0]
	t.pending = t.pending[1:]
	if len(t.pending) == 0 {
		t.pending = nil
	}
	return p
}

// takePendingLocked takes every unsettled request of the tag, oldest first.
func (t *tagState) takePendingLocked() []*Request {
	p := t.pending
	t.pending = nil
	return p
}

// keepLocked adds p, an unsettled request, to the tag's pending ones. When
// maxPending are kept already, the oldest makes room and is returned, to be
// logged as abandoned; nil otherwise.
func (t *tagState) keepLocked(p *Request) (dropped *Request) {
	if len(t.pending) >= maxPending {
		dropped = t.pending[0]
		t.pending = t.pending[1:]
	}
	t.pending = append(t.pending, p)
	return dropped
}
