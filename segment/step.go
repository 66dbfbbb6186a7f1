package segment

import (
	"math"
	"time"
)

// DefaultMaxStep bounds the size of one range when the tag sets no max_step.
// It is Leaf's limit: large enough for ~1,100 IDs/s per instance with a
// 15-minute period, small enough that a crash loses at most a few million IDs.
const DefaultMaxStep = 1_000_000

// Growth limits of the step policy, per load.
const (
	// growth bounds the step's growth per load when callers never waited.
	growth = 4
	// starvedGrowth bounds it when callers waited on an empty buffer since
	// the last load started: the rate seen then is only what the ranges
	// allowed, not what callers asked for.
	starvedGrowth = 16
	// coverFactor sizes a range to last this many load latencies at the
	// observed rate, so that the next load, started once a threshold of the
	// range is used, lands before it runs out even if the latency doubles.
	coverFactor = 4
	// maxCover bounds that cover: a range never grows past this much of the
	// observed rate per load for the latency's sake (a slow load or a burst
	// does not jump to max_step).
	maxCover = time.Second
)

// StepPolicy sizes the next range so that it lasts about Period at the rate
// observed, bounded by the tag's minimum step and maximum step.
//
// The size follows the observed rate, but moves at most 4× up and 2× down per
// load: fast enough to reach a busy tag's rate in a few loads (Leaf only
// doubles), damped enough that one burst at start-up does not jump to the
// maximum (a large step costs a large gap when an instance crashes) and one
// pause does not collapse it. Two things let it grow faster, so that a range
// outlasts the load of the next one:
//
//   - the range covers coverFactor load latencies at the observed rate (at
//     most maxCover of that rate), whatever the 4× limit says;
//   - when callers waited on an empty buffer, the rate observed is a floor
//     (the ranges ran out, not the demand), and the step may grow 16×.
//
// A Runway sets a floor under all of that: the range covers Runway at the
// recent peak rate (Sample.Peak) with a quarter of headroom, so that the
// buffer holds the runway even at the moment it switches ranges. The floor
// is bounded by Max like the rest: a tag whose max_step is below the runway's
// need holds less, and says so (Stats.RunwayMet). Max is the bound on
// purpose: it is the largest gap an instance that crashes can leave behind
// per range, which the tag's owner chose, and no runway may widen it.
type StepPolicy struct {
	Min    int64         // the tag's step: the smallest range ever asked for
	Max    int64         // the tag's max_step; 0 means DefaultMaxStep
	Period time.Duration // target life of one range
	// Runway is how long the buffers must carry callers at the peak rate
	// without a load; 0 sets no floor.
	Runway time.Duration
}

// Sample is what a buffer observed since its last load started.
type Sample struct {
	Used    int64         // IDs handed out
	Elapsed time.Duration // the time they took
	// Latency is the last load's latency; 0 when unknown.
	Latency time.Duration
	// Starved is true when callers found the buffer empty and waited for a
	// load.
	Starved bool
	// Peak is the recent peak rate in IDs per second, decaying slowly (see
	// Buffer); the runway floor is sized from it.
	Peak float64
}

// Next returns the size of the next range, given the size of the last one
// and what was observed since the last load started.
func (p StepPolicy) Next(last int64, s Sample) int64 {
	lo, hi := p.bounds()
	return max(p.next(last, s, lo, hi), min(RunwayNeed(p.Runway, s.Peak, hi), hi))
}

// runwayHeadroom is how much more than the runway at the peak rate a range
// covers and the prefetch point keeps: the rate measured next is noisy, and
// a range sized exactly to the runway would report it short at every
// switch.
const runwayHeadroom = 1.25

// RunwayNeed returns the IDs that last runway at peak IDs per second, with
// the headroom the step and the prefetch point keep, at most limit (so that
// no float overflows an int64). It is 0 when either is 0.
func RunwayNeed(runway time.Duration, peak float64, limit int64) int64 {
	if runway <= 0 || peak <= 0 {
		return 0
	}
	return saturate(math.Ceil(min(runwayHeadroom*peak*runway.Seconds(), float64(limit))), limit)
}

func (p StepPolicy) next(last int64, s Sample, lo, hi int64) int64 {
	if last < lo {
		last = lo
	}
	if s.Used <= 0 || s.Elapsed <= 0 || p.Period <= 0 {
		return clamp(last/2, lo, hi)
	}
	rate := float64(s.Used) / float64(s.Elapsed) // IDs per nanosecond
	want := min(rate*float64(p.Period), float64(hi))
	up := growth * float64(last)
	if s.Starved {
		up = starvedGrowth * float64(last)
	}
	cover := rate * float64(coverFactor*min(s.Latency, maxCover/coverFactor))
	up = min(max(up, cover), float64(hi))
	next := clamp(saturate(math.Ceil(min(want, up)), hi), last/2, hi)
	return clamp(next, lo, hi)
}

// saturate converts f (at most float64(hi)) to an int64, hi when f reaches
// float64(hi): that float may be above hi (float64(MaxInt64) is 2^63), and
// converting it would wrap to a negative size.
func saturate(f float64, hi int64) int64 {
	if f >= float64(hi) {
		return hi
	}
	return int64(f)
}

func (p StepPolicy) bounds() (lo, hi int64) {
	lo, hi = p.Min, p.Max
	if lo < 1 {
		lo = 1
	}
	if hi <= 0 {
		hi = DefaultMaxStep
	}
	if hi < lo {
		hi = lo
	}
	return lo, hi
}

func clamp(v, lo, hi int64) int64 {
	return min(max(v, lo), hi)
}
