package segment

import (
	"math"
	"time"
)

// Stats is a snapshot of a buffer, for health pages and metrics.
type Stats struct {
	Tag string
	// Current is the range being served and Next its next ID to hand out;
	// nil before the first load. Next is 0 when the range is used up at
	// 2^63-1: there is no next ID.
	Current *Range
	Next    int64
	// Remaining is the number of IDs left in the current range, and
	// RemainingRatio that number over the range's size.
	Remaining      int64
	RemainingRatio float64
	// NextRange is the range fetched ahead, nil when none is ready.
	NextRange *Range
	Loading   bool
	// Step is the size of the last granted range; MinStep and MaxStep the
	// tag's bounds (MaxStep 0 means DefaultMaxStep).
	Step, MinStep, MaxStep int64
	Loads                  int64
	LoadFailures           int64
	Refused                int64 // ranges refused by the anti-rollback check
	Recovered              int64 // ranges recovered by request ID after a lost reply
	Repaired               int64 // rollbacks repaired: max_id found below the floor and raised to it
	LastLoadLatency        time.Duration
	AvgLoadLatency         time.Duration
	LastLoadAt             time.Time
	LastRequestID          string
	LastError              string
	Issued                 int64 // IDs handed out
	Abandoned              int64 // IDs granted but never handed out (closed buffer)
	GivenBack              int64 // unused IDs returned to the store at close
	Highest                int64 // highest ID ever granted to this buffer
	// Serving is true when the buffer can hand out an ID without waiting.
	Serving bool
	// NextLate is true when the next range should be here and is not: the
	// current range is past the prefetch threshold, no next range is ready
	// and the last load failed.
	NextLate bool
	// Rate is the issue rate in IDs per second, averaged since the last
	// load started (see rateLocked).
	Rate float64
	// Runway is the runway in force (0: none); Peak the recent peak rate
	// in IDs per second it is measured at; RunwayHeld how long Available
	// lasts at Peak (math.MaxInt64 when Peak is 0). RunwayMet is true when
	// there is no runway or RunwayHeld reaches it; RunwayShort says why
	// not otherwise (one of the RunwayShort constants).
	Runway      time.Duration
	Peak        float64
	RunwayHeld  time.Duration
	RunwayMet   bool
	RunwayShort string
}

// Available returns the IDs the buffer can hand out without a load: the
// rest of the current range and the whole next range.
func (s Stats) Available() int64 {
	n := s.Remaining
	if s.NextRange != nil {
		n += s.NextRange.Len()
	}
	return n
}

// UntilDry estimates how long the buffer lasts without a load at the
// current rate. ok is false when the rate is zero: it never runs dry.
func (s Stats) UntilDry() (d time.Duration, ok bool) {
	if s.Rate <= 0 {
		return 0, false
	}
	secs := float64(s.Available()) / s.Rate
	if secs >= float64(math.MaxInt64/int64(time.Second)) {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(secs * float64(time.Second)), true
}

// minRateWindow is the shortest window the rate is averaged over: a load
// has just started, so the window before is added.
const minRateWindow = 10 * time.Second

// rateLocked estimates the issue rate from the IDs issued since the last
// load started. The window starts are recorded when a load starts, so the
// estimate costs nothing on the path that hands out IDs.
func (b *Buffer) rateLocked(now time.Time, issued int64) float64 {
	at, ids := b.rateAt, b.rateIDs
	if now.Sub(at) < minRateWindow && !b.prevAt.IsZero() {
		at, ids = b.prevAt, b.prevIDs
	}
	elapsed := now.Sub(at)
	if at.IsZero() || elapsed <= 0 {
		return 0
	}
	return float64(issued-ids) / elapsed.Seconds()
}

// Stats returns a snapshot of the buffer.
func (b *Buffer) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.counters
	st := Stats{
		Tag:             b.cfg.Tag,
		Loading:         b.loading,
		Step:            b.step,
		MinStep:         b.minStep,
		MaxStep:         b.maxStep,
		Loads:           c.loads,
		LoadFailures:    c.failures,
		Refused:         c.refused,
		Recovered:       c.recovered,
		Repaired:        c.repaired,
		LastLoadLatency: c.lastLatency,
		LastLoadAt:      c.lastLoadAt,
		LastRequestID:   c.lastRequestID,
		Issued:          b.issuedLocked(),
		Abandoned:       b.abandoned,
		GivenBack:       b.givenBack,
		Highest:         b.highest,
	}
	if c.loads > 0 {
		st.AvgLoadLatency = c.totalLatency / time.Duration(c.loads)
	}
	if b.lastErr != nil {
		st.LastError = b.lastErr.Error()
	}
	if s := b.cur.Load(); s != nil {
		r := s.Range
		st.Current = &r
		st.Remaining = s.Len() - s.used()
		switch {
		case st.Remaining > 0:
			st.Next = s.Last - st.Remaining + 1
		case s.Last < math.MaxInt64:
			st.Next = s.Last + 1
		}
		st.RemainingRatio = float64(st.Remaining) / float64(s.Len())
		st.NextLate = b.next == nil && b.lastErr != nil && s.used() > s.prefetchAt-s.First
	}
	now := b.cfg.Now()
	st.Rate = b.rateLocked(now, st.Issued)
	if b.next != nil {
		r := b.next.Range
		st.NextRange = &r
	}
	b.runwayLocked(&st, now)
	st.Serving = !b.closed && (st.Remaining > 0 || st.NextRange != nil)
	return st
}
