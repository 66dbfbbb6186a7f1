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
// lost and no retry settled it before the load gave up. The next load of the
// tag resumes it with the same request ID instead of starting a new one, so
// a range committed for it is found and served instead of leaking.
type pendingRequest struct {
	req Request
}

// load fetches one segment for tag: the segment.Loader of every buffer.
//
// The request ID is chosen once, before the first attempt. Every retry
// reuses it, so the store grants it at most once:
//   - success: the range is ours;
//   - ErrAlreadyGranted: an earlier attempt committed; look it up;
//   - ErrUnknownTag, ErrExhausted: final, nothing committed;
//   - ErrAmbiguous (reply lost): look the request up first, then retry it;
//   - any other error: nothing committed; retry.
//
// Retries pause with exponential backoff and full jitter until ctx ends.
func (a *Allocator) load(ctx context.Context, tag string, size int64) (segment.Grant, error) {
	req, uncertain, err := a.request(tag, size)
	if err != nil {
		return segment.Grant{}, err
	}
	log := a.cfg.Logger.With("biz_tag", tag, "request_id", req.ID)
	start := a.cfg.Now()
	var lastErr error
	for attempt := 0; ; attempt++ {
		// An already-granted answer is looked up at once: it is settled.
		if attempt > 0 && !errors.Is(lastErr, ErrAlreadyGranted) {
			pause := a.cfg.Jitter(min(a.cfg.RetryMin<<min(attempt, 16), a.cfg.RetryMax))
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return segment.Grant{}, a.giveUp(req, uncertain, log, fmt.Errorf("%w (after %d attempts: %w)", ctx.Err(), attempt, lastErr))
			}
		}
		if uncertain {
			seg, err := a.lookup(ctx, req.ID)
			if err == nil {
				return a.recovered(req, seg, log, a.cfg.Now().Sub(start)), nil
			}
			if !errors.Is(err, ErrNotFound) {
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
			uncertain = true
		case errors.Is(err, ErrUnknownTag), errors.Is(err, ErrExhausted), errors.Is(err, ErrInvalidTag):
			return segment.Grant{}, err
		case errors.Is(err, ErrAmbiguous):
			log.Warn("segment allocation reply lost; will look the request up", "err", err, "attempt", attempt+1)
			uncertain = true
		}
		lastErr = err
	}
}

// request returns the allocation to attempt for tag: the unsettled one left
// by an earlier load, or a new one with a fresh UUIDv7. An unsettled one is
// taken out of pending, so that no two loads ever hold it at once (a
// forgotten buffer's load may still run beside a new buffer's); giveUp puts
// it back.
func (a *Allocator) request(tag string, size int64) (Request, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.pending[tag]; ok {
		delete(a.pending, tag)
		return p.req, true, nil
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Request{}, false, fmt.Errorf("new request id: %w", err)
	}
	return Request{ID: id, Tag: tag, Size: size, Instance: a.cfg.Instance, Floor: a.highest[tag]}, false, nil
}

// giveUp ends a load that ran out of time. An allocation that may have
// committed is kept, to be resumed by the tag's next load.
func (a *Allocator) giveUp(req Request, uncertain bool, log interface{ Warn(string, ...any) }, err error) error {
	if !uncertain {
		return err
	}
	a.mu.Lock()
	_, taken := a.pending[req.Tag]
	if !taken {
		a.pending[req.Tag] = &pendingRequest{req: req}
	}
	a.mu.Unlock()
	if taken {
		// Another load left its own unsettled request: keep that one. If
		// this one committed, its range is a gap, never served.
		log.Warn("segment allocation unsettled and not resumable; if it committed, its range is a gap", "err", err)
		return err
	}
	log.Warn("segment allocation unsettled; the next load resumes it", "err", err)
	return err
}

// granted raises the floor of the tag's next requests past seg. A segment
// at or below the floor (from a store that ignores Floor) leaves it as it is:
// the buffer refuses that segment.
func (a *Allocator) granted(tag string, seg Segment) {
	a.mu.Lock()
	if seg.First > a.highest[tag] {
		a.highest[tag] = seg.Last
	}
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
	ctx, cancel := context.WithTimeout(ctx, a.cfg.AttemptTimeout)
	defer cancel()
	seg, err := a.cfg.Store.Allocate(ctx, req)
	if err == nil && (seg.RequestID != req.ID || seg.Tag != req.Tag) {
		return Segment{}, fmt.Errorf("store answered request %s for %q with %s for %q", req.ID, req.Tag, seg.RequestID, seg.Tag)
	}
	return seg, err
}

func (a *Allocator) lookup(ctx context.Context, id uuid.UUID) (Segment, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.AttemptTimeout)
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
