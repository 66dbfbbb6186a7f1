package segment

import (
	"math"
	"time"
)

// DefaultMaxStep bounds the size of one range when the tag sets no max_step.
// It is Leaf's limit: large enough for ~1,100 IDs/s per instance with a
// 15-minute period, small enough that a crash loses at most a few million IDs.
const DefaultMaxStep = 1_000_000

// StepPolicy sizes the next range so that it lasts about Period at the rate
// observed, bounded by the tag's minimum step and maximum step.
//
// The size follows the observed rate, but moves at most 4× up and 2× down per
// load: fast enough to reach a busy tag's rate in a few loads (Leaf only
// doubles), damped enough that one burst at start-up does not jump to the
// maximum (a large step costs a large gap when an instance crashes) and one
// pause does not collapse it.
type StepPolicy struct {
	Min    int64         // the tag's step: the smallest range ever asked for
	Max    int64         // the tag's max_step; 0 means DefaultMaxStep
	Period time.Duration // target life of one range
}

// Next returns the size of the next range, given the size of the last one
// and the used IDs observed over elapsed.
func (p StepPolicy) Next(last, used int64, elapsed time.Duration) int64 {
	lo, hi := p.bounds()
	if last < lo {
		last = lo
	}
	if used <= 0 || elapsed <= 0 || p.Period <= 0 {
		return clamp(last/2, lo, hi)
	}
	want := float64(used) * float64(p.Period) / float64(elapsed)
	if want > float64(hi) {
		want = float64(hi)
	}
	next := clamp(int64(math.Ceil(want)), last/2, 4*last)
	return clamp(next, lo, hi)
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
