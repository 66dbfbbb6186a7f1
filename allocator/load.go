package allocator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/segment"
)

// pendingRequest is an allocation whose outcome is unknown: its reply was
// lost and no retry settled it before the load gave up. A later load of the
// tag resumes it with the same request ID instead of starting a new one, so
// a segment committed for it is found and served (or, when the tag was
// granted more since, counted as a gap) instead of leaking.
type pendingRequest struct {
	req   Request
	since time.Time // when the load that chose it started
}

// maxPending bounds the unsettled requests kept per tag; past it the oldest
// is abandoned.
const maxPending = 8

// load fetches one segment for tag: the segment.Loader of every buffer.
//
// The request ID is chosen once, before the first attempt. Every retry
// reuses it, so the store grants it at most once:
//   - success: the segment is ours;
//   - ErrAlreadyGranted: an earlier attempt committed; look it up, and only
//     look it up from then on (after a pause when it cannot be seen yet);
//   - ErrUnknownTag, ErrExhausted: final, nothing committed;
//   - ErrAmbiguous (reply lost): look the request up first, then retry it;
//   - ErrNotReplicated (granted, standbys not confirmed): the same;
//   - a lookup that finds a caller's range (its ID claimed through the
//     range API before an attempt of ours committed) serves none of it:
//     the load goes on with a new request;
//   - a lookup that finds the segment partly given back serves what the
//     request kept; one given back in full settles it (ErrGivenBack), and
//     the load goes on with a new request;
//   - any other error: nothing committed; retry.
//
// A segment found by lookup at or below what the tag was granted since is a
// settled gap: counted and logged as abandoned, and the load goes on with
// a new request. Retries pause with exponential backoff and full jitter
// until ctx ends.
func (a *Allocator) load(ctx context.Context, tag string, size int64) (segment.Grant, error) {
	start := a.cfg.Now()
	p, uncertain, err := a.request(tag, size, start)
	if err != nil {
		return segment.Grant{}, err
	}
	req := p.req
	log := a.cfg.Logger.With("biz_tag", tag, "request_id", req.ID)
	var (
		lastErr error
		granted bool // the store said ErrAlreadyGranted: only look it up
		pause   bool
	)
	for attempt := 0; ; attempt++ {
		if pause {
			wait := a.cfg.Jitter(min(a.cfg.RetryMin<<min(attempt, 16), a.cfg.RetryMax))
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return segment.Grant{}, a.giveUp(p, uncertain || granted, log, fmt.Errorf("%w (after %d attempts: %w)", ctx.Err(), attempt, lastErr))
			}
		}
		pause = true
		if uncertain || granted {
			seg, err := a.lookup(ctx, req.ID)
			switch {
			case err == nil && !seg.Holder.IsZero(), errors.Is(err, ErrGivenBack) && !seg.Holder.IsZero():
				// A caller's range under this instance's request ID: the
				// ID was read from a log and claimed through the range API
				// before an attempt of ours committed. The range is that
				// caller's; serving it too would hand its IDs out twice.
				// Nothing of ours committed under the ID: a new request.
				log.Warn("request id taken by a caller's range grant before this instance's request committed; not served, the load goes on with a new request",
					"holder", seg.Holder.String())
				if p, uncertain, err = a.request(tag, size, a.cfg.Now()); err != nil {
					return segment.Grant{}, err
				}
				req = p.req
				log = a.cfg.Logger.With("biz_tag", tag, "request_id", req.ID)
				granted, pause, lastErr = false, false, nil
				continue
			case errors.Is(err, ErrGivenBack), err == nil && a.settledGap(tag, seg):
				if err != nil {
					log.Warn("request settled: its whole range was given back; the load goes on with a new request", "first", seg.First)
				} else {
					log.Warn("ABANDONED ids: granted to a request whose reply was lost, and found only after the tag was granted more; never handed out (a gap)",
						"first", seg.First, "last", seg.Last, "count", seg.Last-seg.First+1)
				}
				if p, uncertain, err = a.request(tag, size, a.cfg.Now()); err != nil {
					return segment.Grant{}, err
				}
				req = p.req
				log = a.cfg.Logger.With("biz_tag", tag, "request_id", req.ID)
				granted, pause, lastErr = false, false, nil
				continue
			case err == nil:
				return a.recovered(req, seg, log, a.cfg.Now().Sub(start)), nil
			case errors.Is(err, ErrNotFound) && granted:
				// Granted, but this connection cannot see it yet (a
				// replica or a pooler behind): look again after a pause,
				// never re-send.
				lastErr = fmt.Errorf("request granted but not visible to its lookup yet: %w", err)
				continue
			case !errors.Is(err, ErrNotFound):
				lastErr = err
				continue
			}
			// Not committed yet. The original may still be in flight:
			// retrying the same ID waits behind it and then either wins
			// or hits ErrAlreadyGranted.
		}
		seg, err := a.allocate(ctx, req)
		switch {
		case err == nil:
			a.granted(tag, seg)
			grant := toGrant(seg, false)
			if seg.Repaired {
				log.Error("REPAIRED rollback: the tag's max_id was below the highest id this instance was granted (restored backup or failover to a lagging replica?); raised it to that id and serving above it; ids other instances were granted above it may be handed out again: bump the tag past the old high-water mark",
					"max_id_found", seg.FoundMaxID, "raised_to", req.Floor, "first", seg.First, "last", seg.Last, "latency", a.cfg.Now().Sub(start))
			}
			log.Info("segment loaded", "first", seg.First, "last", seg.Last, "step", grant.Len(), "asked", size,
				"latency", a.cfg.Now().Sub(start), "attempts", attempt+1)
			return grant, nil
		case errors.Is(err, ErrAlreadyGranted):
			// Settled: look it up at once.
			granted, pause = true, false
		case errors.Is(err, ErrUnknownTag), errors.Is(err, ErrExhausted), errors.Is(err, ErrInvalidTag):
			return segment.Grant{}, err
		case errors.Is(err, ErrNotReplicated):
			// Granted, but the standbys may not have it: not served until
			// a lookup confirms it. If the primary fails first, the lookup
			// on the promoted one does not find it and the same request is
			// sent again there.
			log.Warn("segment granted but not confirmed on the standbys; not served until it is", "err", err, "attempt", attempt+1)
			uncertain = true
		case errors.Is(err, ErrAmbiguous):
			log.Warn("segment allocation reply lost; will look the request up", "err", err, "attempt", attempt+1)
			uncertain = true
		}
		lastErr = err
	}
}

// request returns the allocation to attempt for tag: the oldest unsettled
// one left by an earlier load, or a new one with a fresh UUIDv7. An unsettled
// one is taken out of pending, so that no two loads ever hold it at once (a
// forgotten buffer's load may still run beside a new buffer's); giveUp puts
// it back. One older than half the segment log's retention is abandoned
// instead: its log row may be pruned, and a request re-sent without its row
// would be granted a second segment while the first stays an untraced gap. A
// new request is dated now.
func (a *Allocator) request(tag string, size int64, now time.Time) (pendingRequest, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.stateLocked(tag)
	defer a.dropIfIdleLocked(tag, t)
	for p := t.oldestPendingLocked(); p != nil; p = t.oldestPendingLocked() {
		if r := a.cfg.LogRetention; r > 0 && now.Sub(p.since) > r/2 {
			a.abandonedRequestLocked(p.req, "unsettled for longer than half the segment log's retention; never sent again")
			continue
		}
		return *p, true, nil
	}
	id, err := uuid.NewV7()
	if err != nil {
		return pendingRequest{}, false, fmt.Errorf("new request id: %w", err)
	}
	req := Request{ID: id, Tag: tag, Size: size, Instance: a.cfg.Instance, Floor: t.floor}
	return pendingRequest{req: req, since: now}, false, nil
}

// abandonedRequestLocked logs an unsettled request given up for good. Its
// segment, if it committed, is unknown here: the segment log has it.
func (a *Allocator) abandonedRequestLocked(req Request, why string) {
	a.cfg.Logger.Warn("ABANDONED request: "+why+"; if it committed, its range is a gap (the segment log has it)",
		"biz_tag", req.Tag, "request_id", req.ID)
}

// giveUp ends a load that ran out of time. An allocation that may have
// committed is kept, to be resumed by one of the tag's next loads.
func (a *Allocator) giveUp(p pendingRequest, uncertain bool, log interface{ Warn(string, ...any) }, err error) error {
	if !uncertain {
		return err
	}
	a.mu.Lock()
	if dropped := a.stateLocked(p.req.Tag).keepLocked(&p); dropped != nil {
		a.abandonedRequestLocked(dropped.req, "too many unsettled requests for the tag")
	}
	a.mu.Unlock()
	log.Warn("segment allocation unsettled; a next load resumes it", "err", err)
	return err
}

// settledGap reports whether seg, found by lookup, is a gap of tag's (see
// tagState.settledGapLocked), and counts it.
func (a *Allocator) settledGap(tag string, seg Segment) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stateLocked(tag).settledGapLocked(seg)
}

// abandon logs and counts unused ranges of a buffer that nobody serves any
// more.
func (a *Allocator) abandon(tag string, unused []segment.Range) {
	var n int64
	for _, r := range unused {
		n += r.Len()
		a.logAbandoned(tag, r)
	}
	if n == 0 {
		return // a made-up tag's buffer, for one, leaves nothing to count
	}
	a.mu.Lock()
	a.stateLocked(tag).abandonedLocked(n)
	a.mu.Unlock()
}

// logAbandoned logs granted IDs that will never be handed out.
func (a *Allocator) logAbandoned(tag string, r segment.Range) {
	a.cfg.Logger.Warn("ABANDONED ids: granted but never handed out (a gap)",
		"biz_tag", tag, "first", r.First, "last", r.Last, "count", r.Len())
}

// granted raises the floor of the tag's next requests past seg (see
// tagState.grantedLocked).
func (a *Allocator) granted(tag string, seg Segment) {
	a.mu.Lock()
	a.stateLocked(tag).grantedLocked(seg)
	a.mu.Unlock()
}

// recovered returns a segment found by its request ID. Its log line is the
// segment's load line, with the same fields as "segment loaded", but loud.
func (a *Allocator) recovered(req Request, seg Segment, log interface{ Warn(string, ...any) }, latency time.Duration) segment.Grant {
	a.granted(req.Tag, seg)
	grant := toGrant(seg, true)
	log.Warn("RECOVERED segment by request id after a lost reply", "first", seg.First, "last", seg.Last,
		"step", grant.Len(), "asked", req.Size, "latency", latency)
	return grant
}

func (a *Allocator) allocate(ctx context.Context, req Request) (Segment, error) {
	ctx, cancel := context.WithTimeout(ctx, a.attemptTimeout())
	defer cancel()
	seg, err := a.cfg.Store.Allocate(ctx, req)
	if err == nil && (seg.RequestID != req.ID || seg.Tag != req.Tag) {
		return Segment{}, fmt.Errorf("store answered request %s for %q with %s for %q", req.ID, req.Tag, seg.RequestID, seg.Tag)
	}
	return seg, err
}

func (a *Allocator) lookup(ctx context.Context, id uuid.UUID) (Segment, error) {
	ctx, cancel := context.WithTimeout(ctx, a.attemptTimeout())
	defer cancel()
	return a.cfg.Store.Lookup(ctx, id)
}

func toGrant(seg Segment, recovered bool) segment.Grant {
	return segment.Grant{
		Range:     segment.Range{First: seg.First, Last: seg.Last},
		MinStep:   seg.Step,
		MaxStep:   seg.MaxStep,
		RequestID: seg.RequestID.String(),
		Recovered: recovered,
		Repaired:  seg.Repaired,
	}
}
