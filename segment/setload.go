package segment

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// maxPending bounds the unsettled requests kept per tag; past it the oldest
// is abandoned (logged). Loads of one buffer never overlap, and each load
// resumes a kept request before it makes a new one, so a tag gathers more
// than one only while loads of its dropped buffers (closing for at most
// closeWait) run beside its new buffer's, each leaving at most one when
// it gives up. Keeping one costs a lookup at a next load (or at Close);
// dropping one costs a range that may be an untraced gap (never a
// duplicate). Eight covers the overlaps of a flapping first load with room
// to spare, at the cost of eight lookups at most.
const maxPending = 8

// load fetches one range for tag: the Loader of every buffer of the Set.
//
// The request ID is chosen once, before the first attempt (or resumed from
// an earlier load that gave up unsettled). Every retry reuses it, so the
// granter grants it at most once:
//   - success: the range is ours;
//   - ErrAlreadyGranted: an earlier attempt committed; look it up, and only
//     look it up from then on (after a pause when it cannot be seen yet);
//   - ErrRefused: final, nothing committed (unknown tag, exhausted);
//   - ErrAmbiguous: look the request up first, then send it again;
//   - ErrNotHeld: the request ID is settled with nothing of ours under it
//     (another caller holds it, or its range was given back in full): it
//     is never resumed, and the load goes on with a new request;
//   - any other error: nothing committed; send it again.
//
// A range found by lookup at or below what the tag was granted since is a
// settled gap: counted and logged as abandoned, and the load goes on with
// a new request. Retries pause with exponential backoff and full jitter
// until ctx ends; then a request that may have committed is kept for the
// tag's next load.
func (s *Set) load(ctx context.Context, tag string, size int64) (Grant, error) {
	start := s.cfg.Now()
	req, uncertain, err := s.request(tag, size, start)
	if err != nil {
		return Grant{}, err
	}
	log := s.cfg.Logger.With("biz_tag", tag, "request_id", req.ID.String())
	var (
		lastErr error
		granted bool // the granter said ErrAlreadyGranted: only look it up
		pause   bool
	)
	// renew goes on with a new request, at once.
	renew := func() error {
		if req, uncertain, err = s.request(tag, size, s.cfg.Now()); err != nil {
			return err
		}
		log = s.cfg.Logger.With("biz_tag", tag, "request_id", req.ID.String())
		granted, pause, lastErr = false, false, nil
		return nil
	}
	for attempt := 0; ; attempt++ {
		if pause {
			wait := s.cfg.Jitter(min(s.cfg.RetryMin<<min(attempt, 16), s.cfg.RetryMax))
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return Grant{}, s.giveUp(req, uncertain || granted, log, fmt.Errorf("%w (after %d attempts: %w)", ctx.Err(), attempt, lastErr))
			}
		}
		pause = true
		var g Grant
		if uncertain || granted {
			g, err = s.cfg.Granter.Lookup(ctx, req)
			switch {
			case errors.Is(err, ErrNotFound) && granted:
				// Granted, but the granter cannot see it yet (a replica
				// or a pooler behind): look again after a pause, never
				// send it again.
				lastErr = fmt.Errorf("request granted but not visible to its lookup yet: %w", err)
				continue
			case errors.Is(err, ErrNotFound):
				// Not committed yet. The original may still be in
				// flight: sending the same ID again waits behind it and
				// then either wins or hits ErrAlreadyGranted.
				g, err = s.cfg.Granter.Grant(ctx, req)
			}
		} else {
			g, err = s.cfg.Granter.Grant(ctx, req)
		}
		switch {
		case err == nil && g.Recovered && s.settledGap(tag, g):
			log.Warn("ABANDONED ids: granted to a request whose reply was lost, and found only after the tag was granted more; never handed out (a gap)",
				"first", g.First, "last", g.Last, "count", g.Len())
			if err := renew(); err != nil {
				return Grant{}, err
			}
			continue
		case err == nil:
			s.granted(tag, req, g)
			latency := s.cfg.Now().Sub(start)
			if g.Recovered {
				log.Warn("RECOVERED segment by request id after a lost reply", "first", g.First, "last", g.Last,
					"step", g.Len(), "asked", req.Size, "latency", latency)
			} else {
				log.Info("segment loaded", "first", g.First, "last", g.Last, "step", g.Len(), "asked", size,
					"latency", latency, "attempts", attempt+1)
			}
			return g, nil
		case errors.Is(err, ErrNotHeld):
			log.Warn("request settled without a range for this owner; not served, the load goes on with a new request", "err", err)
			if err := renew(); err != nil {
				return Grant{}, err
			}
			continue
		case errors.Is(err, ErrAlreadyGranted):
			// Settled: look it up at once.
			granted, pause = true, false
		case errors.Is(err, ErrRefused):
			if uncertain || granted {
				// An earlier attempt may have committed: keep its ID.
				s.keep(req)
			}
			return Grant{}, err
		case errors.Is(err, ErrAmbiguous):
			log.Warn("segment allocation reply lost or unconfirmed; will look the request up", "err", err, "attempt", attempt+1)
			uncertain = true
		}
		lastErr = err
	}
}

// request returns the request to send for tag: the oldest unsettled one
// left by an earlier load, or a new one with a fresh UUIDv7. An unsettled
// one is taken out of pending, so that no two loads ever hold it at once (a
// forgotten buffer's load may still run beside a new buffer's); giveUp puts
// it back. One older than ResumeWithin is abandoned instead: a granter that
// forgot it would grant it a second range while the first stays an
// untraced gap. A new request is dated now.
func (s *Set) request(tag string, size int64, now time.Time) (Request, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.stateLocked(tag)
	defer s.dropIfIdleLocked(tag, t)
	for p := t.oldestPendingLocked(); p != nil; p = t.oldestPendingLocked() {
		if r := s.cfg.ResumeWithin; r > 0 && now.Sub(p.Since) > r {
			s.abandonedRequest(*p, "unsettled for longer than its granter remembers it; never sent again")
			continue
		}
		return *p, true, nil
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Request{}, false, fmt.Errorf("new request id: %w", err)
	}
	req := Request{ID: id, Tag: tag, Size: size, Floor: t.floor, Since: now}
	if s.cfg.HolderKeys {
		req.Key = newHolderKey()
	}
	return req, false, nil
}

// newHolderKey returns a fresh holder key: 32 random bytes in unpadded
// base64url.
func newHolderKey() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// giveUp ends a load that ran out of time. A request that may have
// committed is kept, to be resumed by one of the tag's next loads.
func (s *Set) giveUp(req Request, uncertain bool, log interface{ Warn(string, ...any) }, err error) error {
	if !uncertain {
		return err
	}
	s.keep(req)
	log.Warn("segment allocation unsettled; a next load resumes it", "err", err)
	return err
}

// keep adds req to its tag's unsettled requests.
func (s *Set) keep(req Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dropped := s.stateLocked(req.Tag).keepLocked(&req); dropped != nil {
		s.abandonedRequest(*dropped, "too many unsettled requests for the tag")
	}
}

// settledGap reports whether g, found by lookup, is a gap of tag's (see
// tagState.settledGapLocked), and counts it.
func (s *Set) settledGap(tag string, g Grant) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stateLocked(tag).settledGapLocked(g.Range)
}

// granted raises the floor of the tag's next requests past g and keeps
// req for the give-back of g's tail.
func (s *Set) granted(tag string, req Request, g Grant) {
	s.mu.Lock()
	s.stateLocked(tag).grantedLocked(req, g.Range)
	s.mu.Unlock()
}
