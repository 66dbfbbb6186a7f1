package segment

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
)

// The load protocol: how a Set's load gets one range for a tag from its
// Source. The ask's request ID is chosen once, before the first attempt (or
// resumed from an earlier load that gave up unsettled), and every retry
// reuses it, so that the source grants it at most once. Set.load makes the
// calls and logs; loadRun says, for each answer, what comes next.

// maxPending bounds the unsettled asks kept per tag; past it the oldest is
// abandoned (logged). Loads of one buffer never overlap, and each load
// resumes a kept ask before it makes a new one, so a tag gathers more than
// one only while loads of its dropped buffers (closing for at most
// closeWait) run beside its new buffer's, each leaving at most one when it
// gives up. Keeping one costs a lookup at a next load (or at Close);
// dropping one costs a range that may be an untraced gap (never a
// duplicate). Eight covers the overlaps of a flapping first load with room
// to spare, at the cost of eight lookups at most.
const maxPending = 8

// askState is what a load knows of its ask's fate at the source.
type askState uint8

const (
	// askNew: nothing can have committed under the ask (never sent, or
	// every answer so far said nothing did): it is sent.
	askNew askState = iota
	// askUncertain: the ask may have committed (a reply lost or
	// unconfirmed, or resumed from a load that gave up unsettled): it is
	// looked up, and sent again only when the lookup finds nothing.
	askUncertain
	// askGranted: the source said the ask was granted before: it is only
	// looked up from then on, never sent again.
	askGranted
)

// answer is the class of what the source said to one call.
type answer uint8

const (
	answerRange          answer = iota // a range for the ask
	answerGap                          // a range found by lookup at or below the tag's floor: a settled gap
	answerNotFound                     // Lookup: nothing committed under the ask (yet)
	answerAlreadyGranted               // Grant: the ask was granted before
	answerNotHeld                      // settled without a range for this Set
	answerRefused                      // final: nothing granted, asking again will not help
	answerAmbiguous                    // the grant may or may not have committed
	answerFailed                       // any other error: nothing committed
)

// loadStep is what a load does next.
type loadStep uint8

const (
	stepGrant  loadStep = iota // send the ask (Source.Grant)
	stepLookup                 // look the ask up (Source.Lookup)
	stepServe                  // the range answered is the load's
	stepRenew                  // nothing of the Set's is under the ask: go on with a new one, at once
	stepFail                   // the load fails with the answer's error
)

// answerOf classifies the error of a call (step is stepGrant or
// stepLookup). Only a Lookup's ErrNotFound counts as not found; the order
// of the cases decides for an error of several classes.
func answerOf(step loadStep, err error) answer {
	switch {
	case err == nil:
		return answerRange
	case step == stepLookup && errors.Is(err, ErrNotFound):
		return answerNotFound
	case errors.Is(err, ErrNotHeld):
		return answerNotHeld
	case errors.Is(err, ErrAlreadyGranted):
		return answerAlreadyGranted
	case errors.Is(err, ErrRefused):
		return answerRefused
	case errors.Is(err, ErrAmbiguous):
		return answerAmbiguous
	}
	return answerFailed
}

// loadRun is one load's walk through the protocol with its current ask:
// the ask, what is known of its fate, and the attempts so far. Its
// transitions are all in step.
type loadRun struct {
	ask   Ask
	state askState
	// attempt counts the attempts ended: the exponent of the next pause.
	attempt int
	// pause is whether to pause before the next call.
	pause bool
	// lastErr is the last attempt's failure, for the error of a load that
	// runs out of time.
	lastErr error
}

// renew makes ask the run's ask, at once: resumed is whether it is an
// unsettled ask left by an earlier load, which may have committed.
func (l *loadRun) renew(ask Ask, resumed bool) {
	l.ask, l.state, l.pause, l.lastErr = ask, askNew, false, nil
	if resumed {
		l.state = askUncertain
	}
}

// call is the call to make with the ask as it stands: a lookup once it
// may have committed, else a grant.
func (l *loadRun) call() loadStep {
	if l.state == askNew {
		return stepGrant
	}
	return stepLookup
}

// unsettled reports whether the ask may have committed: then a load that
// ends without its range keeps it for the tag's next load.
func (l *loadRun) unsettled() bool { return l.state != askNew }

// pauseFor is the pause before the next call, before jitter: exponential
// in the attempts, from lo up to hi.
func (l *loadRun) pauseFor(lo, hi time.Duration) time.Duration {
	return min(lo<<min(l.attempt, 16), hi)
}

// step takes the answer a to the last call, with its error, and returns
// what to do next.
func (l *loadRun) step(a answer, err error) loadStep {
	switch a {
	case answerRange:
		return stepServe
	case answerRefused:
		return stepFail
	case answerGap, answerNotHeld:
		l.attempt++
		return stepRenew
	case answerNotFound:
		if l.state != askGranted {
			// Not committed yet. The original may still be in flight:
			// sending the same ID again waits behind it and then either
			// wins or hits ErrAlreadyGranted. At once, in the same
			// attempt.
			l.pause = false
			return stepGrant
		}
		// Granted, but the source cannot see it yet (a replica or a
		// pooler behind): look again after a pause, never send it again.
		l.end(fmt.Errorf("request granted but not visible to its lookup yet: %w", err), true)
		return stepLookup
	case answerAlreadyGranted:
		// Settled: look it up at once.
		l.state = askGranted
		l.end(err, false)
		return stepLookup
	case answerAmbiguous:
		if l.state == askNew {
			l.state = askUncertain
		}
	}
	l.end(err, true)
	return l.call()
}

// end ends an attempt that failed with err.
func (l *loadRun) end(err error, pause bool) {
	l.attempt++
	l.pause, l.lastErr = pause, err
}

// load fetches one range for tag: the Loader of every buffer of the Set.
// It walks a loadRun over the Source's answers:
//   - a range: it is the load's;
//   - ErrAlreadyGranted: an earlier attempt committed; look it up, and only
//     look it up from then on (after a pause when it cannot be seen yet);
//   - ErrRefused: final, nothing committed (unknown tag, exhausted);
//   - ErrAmbiguous: look the ask up first, then send it again;
//   - ErrNotHeld: the request ID is settled with nothing of the Set's
//     under it (another caller holds it, or its range was given back in
//     full): it is never resumed, and the load goes on with a new ask;
//   - any other error: nothing committed; send it again.
//
// A range found by lookup at or below what the tag was granted since is a
// settled gap: counted and logged as abandoned, and the load goes on with
// a new ask. Retries pause with exponential backoff and full jitter until
// ctx ends; then an ask that may have committed is kept for the tag's next
// load.
func (s *Set) load(ctx context.Context, tag string, size int64) (Grant, error) {
	start := s.cfg.Now()
	ask, resumed, err := s.nextAsk(tag, size, start)
	if err != nil {
		return Grant{}, err
	}
	var l loadRun
	l.renew(ask, resumed)
	log := askLogger(s.cfg.Logger, ask)
	for next := l.call(); ; {
		if l.pause {
			select {
			case <-time.After(s.cfg.Jitter(l.pauseFor(s.cfg.RetryMin, s.cfg.RetryMax))):
			case <-ctx.Done():
				return Grant{}, s.giveUp(&l, log, fmt.Errorf("%w (after %d attempts: %w)", ctx.Err(), l.attempt, l.lastErr))
			}
		}
		g, err := s.send(ctx, next, l.ask)
		a := answerOf(next, err)
		if a == answerRange && g.Recovered && s.settledGap(tag, g) {
			a = answerGap
		}
		switch next = l.step(a, err); next {
		case stepServe:
			s.granted(tag, l.ask, g)
			latency := s.cfg.Now().Sub(start)
			if g.Recovered {
				log.Warn("RECOVERED segment by request id after a lost reply", "first", g.First, "last", g.Last,
					"step", g.Len(), "asked", l.ask.Size, "latency", latency)
			} else {
				log.Info("segment loaded", "first", g.First, "last", g.Last, "step", g.Len(), "asked", size,
					"latency", latency, "attempts", l.attempt+1)
			}
			return g, nil
		case stepFail:
			if l.unsettled() {
				// An earlier attempt may have committed: keep its ID.
				s.keep(l.ask)
			}
			return Grant{}, err
		case stepRenew:
			if a == answerGap {
				log.Warn("ABANDONED ids: granted to a request whose reply was lost, and found only after the tag was granted more; never handed out (a gap)",
					"first", g.First, "last", g.Last, "count", g.Len())
			} else {
				log.Warn("request settled without a range for this owner; not served, the load goes on with a new request", "err", err)
			}
			if ask, resumed, err = s.nextAsk(tag, size, s.cfg.Now()); err != nil {
				return Grant{}, err
			}
			l.renew(ask, resumed)
			log = askLogger(s.cfg.Logger, ask)
			next = l.call()
		default:
			if a == answerAmbiguous {
				log.Warn("segment allocation reply lost or unconfirmed; will look the request up", "err", err, "attempt", l.attempt)
			}
		}
	}
}

// askLogger returns logger with ask's tag and request ID.
func askLogger(logger *slog.Logger, ask Ask) *slog.Logger {
	return logger.With("biz_tag", ask.Tag, "request_id", ask.ID.String())
}

// send makes the call step (stepGrant or stepLookup) with ask.
func (s *Set) send(ctx context.Context, step loadStep, ask Ask) (Grant, error) {
	if step == stepLookup {
		return s.cfg.Source.Lookup(ctx, ask)
	}
	return s.cfg.Source.Grant(ctx, ask)
}

// nextAsk returns the ask to send for tag, and whether it is resumed: the
// oldest unsettled one left by an earlier load, or a new one with a fresh
// UUIDv7. An unsettled one is taken out of pending, so that no two loads
// ever hold it at once (a forgotten buffer's load may still run beside a
// new buffer's); giveUp puts it back. One older than ResumeWithin is
// abandoned instead: a source that forgot it would grant it a second range
// while the first stays an untraced gap. A new ask is dated now.
func (s *Set) nextAsk(tag string, size int64, now time.Time) (Ask, bool, error) {
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
		return Ask{}, false, fmt.Errorf("new request id: %w", err)
	}
	ask := Ask{ID: id, Tag: tag, Size: size, Floor: t.floor, Since: now}
	if s.cfg.HolderKeys {
		ask.Key = newHolderKey()
	}
	return ask, false, nil
}

// oldestPendingLocked takes the oldest unsettled ask out of the tag's
// pending ones, nil when there is none. Taken out, no second load can
// resume it at the same time.
func (t *tagState) oldestPendingLocked() *Ask {
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

// abandonedRequest logs an unsettled ask given up for good. Its range,
// if it committed, is unknown here: the source's log has it.
func (s *Set) abandonedRequest(ask Ask, why string) {
	s.cfg.Logger.Warn("ABANDONED request: "+why+"; if it committed, its range is a gap (the segment log has it)",
		"biz_tag", ask.Tag, "request_id", ask.ID.String())
}

// newHolderKey returns a fresh holder key: 32 random bytes in unpadded
// base64url.
func newHolderKey() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// giveUp ends a load that ran out of time. An ask that may have committed
// is kept, to be resumed by one of the tag's next loads.
func (s *Set) giveUp(l *loadRun, log *slog.Logger, err error) error {
	if !l.unsettled() {
		return err
	}
	s.keep(l.ask)
	log.Warn("segment allocation unsettled; a next load resumes it", "err", err)
	return err
}

// keep adds ask to its tag's unsettled asks.
func (s *Set) keep(ask Ask) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dropped := s.stateLocked(ask.Tag).keepLocked(&ask); dropped != nil {
		s.abandonedRequest(*dropped, "too many unsettled requests for the tag")
	}
}

// keepLocked adds p, an unsettled ask, to the tag's pending ones. When
// maxPending are kept already, the oldest makes room and is returned, to be
// logged as abandoned; nil otherwise.
func (t *tagState) keepLocked(p *Ask) (dropped *Ask) {
	if len(t.pending) >= maxPending {
		dropped = t.pending[0]
		t.pending = t.pending[1:]
	}
	t.pending = append(t.pending, p)
	return dropped
}

// settledGap reports whether g, found by lookup, is a gap of tag's (see
// tagState.settledGapLocked), and counts it.
func (s *Set) settledGap(tag string, g Grant) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stateLocked(tag).settledGapLocked(g.Range)
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

// granted raises the floor of the tag's next asks past g and keeps ask
// for the give-back of g's tail.
func (s *Set) granted(tag string, ask Ask, g Grant) {
	s.mu.Lock()
	s.stateLocked(tag).grantedLocked(ask, g.Range)
	s.mu.Unlock()
}

// grantedLocked raises the floor past r, a range granted to the tag for
// ask, and keeps ask for r's give-back. A range at or below the floor
// (from a source that ignores Floor) leaves the floor as it is: the
// buffer refuses that range.
func (t *tagState) grantedLocked(ask Ask, r Range) {
	if r.First > t.floor {
		t.floor = r.Last
	}
	t.grants = append(t.grants, grantedAsk{ask: ask, last: r.Last})
	if len(t.grants) > keptGrants {
		t.grants = t.grants[len(t.grants)-keptGrants:]
	}
}
