package segment

import (
	"math"
	"sync/atomic"
)

// span is a range being served. next is the next ID to hand out; it only
// grows, so every value returned by next.Add is handed out at most once.
type span struct {
	Range
	prefetchAt int64 // the first ID whose take starts the next fetch
	// next has a cache line of its own: every take writes it, and the
	// read-only fields above must not move between cores with it.
	_    [cacheLine - 24]byte
	next atomic.Int64
	_    [cacheLine - 8]byte
}

// cacheLine is the size of a CPU cache line on common hardware.
const cacheLine = 64

func newSpan(r Range, threshold float64) *span {
	s := &span{Range: r}
	// Taking prefetchAt makes the used fraction reach the threshold.
	s.prefetchAt = r.First + max(int64(math.Ceil(float64(r.Len())*threshold))-1, 0)
	s.next.Store(r.First)
	return s
}

// take hands out one ID, or ok=false when the span is used up. It is the
// hot path: one add. A take on a used-up span moves next by one; bringing it
// back into the span by wrapping would take 2^63 such takes.
func (s *span) take() (id int64, ok bool) {
	id = s.next.Add(1) - 1
	// id < First only after next wrapped past MaxInt64.
	return id, id >= s.First && id <= s.Last
}

// takeN hands out up to n consecutive IDs (n >= 1). It moves next with a
// compare-and-set, and only by what it hands out: an add of n, whatever n,
// would move it even when the span is used up, and counts near 2^63 would
// wrap it back into the span.
func (s *span) takeN(n int64) (r Range, ok bool) {
	for {
		start := s.next.Load()
		if start < s.First || start > s.Last {
			return Range{}, false
		}
		last := s.Last
		if n-1 < s.Last-start {
			last = start + n - 1
		}
		// last+1 wraps to MinInt64 only when last is MaxInt64: used up.
		if s.next.CompareAndSwap(start, last+1) {
			return Range{First: start, Last: last}, true
		}
	}
}

// used returns how many IDs of s were handed out.
func (s *span) used() int64 {
	n := s.next.Load()
	if n < s.First || n > s.Last {
		return s.Len()
	}
	return n - s.First
}

// exhaust marks s used up and returns its untouched tail, if any.
func (s *span) exhaust() (tail Range, ok bool) {
	n := s.next.Swap(s.Last + 1)
	if n < s.First || n > s.Last {
		return Range{}, false
	}
	return Range{First: n, Last: s.Last}, true
}
