package segment

import (
	"math"
	"time"
)

// DefaultPeakHalfLife is Config.PeakHalfLife's default: ten minutes after a
// burst, the peak the ranges are sized for is still half of the burst's rate
// above the rate seen since.
const DefaultPeakHalfLife = 10 * time.Minute

// minPeakWindow is the shortest window a rate is measured over before it is
// folded into the peak: over less, a handful of IDs would read as a rate
// many times the real one.
const minPeakWindow = time.Second

// Reasons a buffer holds less than its runway (Stats.RunwayShort).
const (
	// RunwayShortStore: the last load failed (the store is unreachable or
	// refuses), or the load in flight has taken longer than slowLoad; the
	// buffer lives on what it holds until a load succeeds.
	RunwayShortStore = "store_unavailable"
	// RunwayShortMaxStep: the runway at the peak rate needs more IDs than
	// the tag's max_step grants in one range; raise max_step or accept the
	// runway the buffer has.
	RunwayShortMaxStep = "max_step_too_small"
	// RunwayShortRate: the rate rose past what the buffer holds (a burst,
	// a cold tag); the next ranges are sized for the new peak.
	RunwayShortRate = "rate_above_held"
)

// slowLoad is how long a load may run before a buffer short of its runway
// blames the store rather than the rate: loads take milliseconds, and one
// that hangs this long meets an outage whose error comes later (at the
// attempt's timeout).
const slowLoad = time.Second

// peakRate is the recent peak issue rate: the highest rate measured over
// windows of at least minPeakWindow, decaying with a half-life. It is
// sampled whenever the buffer's lock holder asks (a load, Stats), which
// costs the path that hands out IDs nothing.
type peakRate struct {
	rate     float64   // IDs per second at at
	at       time.Time // when rate was last decayed and raised
	sampleAt time.Time // start of the window being measured
	sampleN  int64     // IDs issued at sampleAt
}

// observe decays the peak to now and raises it to the rate over the window
// since the last sample, once that window is long enough; it returns the
// peak at now.
func (p *peakRate) observe(now time.Time, issued int64, halfLife time.Duration) float64 {
	if p.sampleAt.IsZero() {
		p.sampleAt, p.sampleN, p.at = now, issued, now
		return 0
	}
	p.rate = p.decayed(now, halfLife)
	p.at = now
	if w := now.Sub(p.sampleAt); w >= minPeakWindow {
		p.rate = max(p.rate, float64(issued-p.sampleN)/w.Seconds())
		p.sampleAt, p.sampleN = now, issued
	}
	return p.rate
}

// decayed returns the peak decayed from p.at to now.
func (p *peakRate) decayed(now time.Time, halfLife time.Duration) float64 {
	if d := now.Sub(p.at); d > 0 && halfLife > 0 {
		return p.rate * math.Exp2(-d.Seconds()/halfLife.Seconds())
	}
	return p.rate
}

// peakLocked samples the peak rate at now.
func (b *Buffer) peakLocked(now time.Time, issued int64) float64 {
	return b.peak.observe(now, issued, b.cfg.PeakHalfLife)
}

// keepRunwayLocked moves sp's prefetch point, before sp is served, so that
// the next load starts while sp still holds the runway at the peak rate,
// plus what the load's latency eats: when that load lands, the remaining IDs
// and the new range hold the runway again. A range smaller than that starts
// its load at once.
func (b *Buffer) keepRunwayLocked(sp *span) {
	if sp == nil || b.runway <= 0 {
		return
	}
	now := b.cfg.Now()
	peak := b.peakLocked(now, b.issuedLocked())
	lead := b.runway + coverFactor*min(b.counters.lastLatency, b.cfg.LoadTimeout)
	keep := RunwayNeed(lead, peak, math.MaxInt64)
	if keep <= 0 {
		return
	}
	if keep >= sp.Len() {
		sp.prefetchAt = sp.First
		return
	}
	sp.prefetchAt = min(sp.prefetchAt, sp.Last-keep+1)
}

// runwayLocked fills st's runway fields: the runway in force, the IDs held
// at the peak rate, and why they fall short, if they do.
func (b *Buffer) runwayLocked(st *Stats, now time.Time) {
	st.Runway = b.runway
	st.Peak = b.peakLocked(now, st.Issued)
	if st.Peak <= 0 {
		st.RunwayHeld = time.Duration(math.MaxInt64)
	} else {
		secs := float64(st.Available()) / st.Peak
		st.RunwayHeld = time.Duration(math.MaxInt64)
		if secs < float64(math.MaxInt64/int64(time.Second)) {
			st.RunwayHeld = time.Duration(secs * float64(time.Second))
		}
	}
	st.RunwayMet = b.runway <= 0 || st.RunwayHeld >= b.runway
	if st.RunwayMet {
		return
	}
	_, hi := StepPolicy{Min: b.minStep, Max: b.maxStep}.bounds()
	switch {
	// rateAt is when the load in flight started (nextSizeLocked).
	case b.lastErr != nil, b.loading && now.Sub(b.rateAt) >= max(slowLoad, coverFactor*b.counters.lastLatency):
		st.RunwayShort = RunwayShortStore
	case st.Peak*b.runway.Seconds() > float64(hi):
		st.RunwayShort = RunwayShortMaxStep
	default:
		st.RunwayShort = RunwayShortRate
	}
}
