package segment

import "time"

// Stats is a snapshot of a buffer, for health pages and metrics.
type Stats struct {
	Tag string
	// Current is the range being served and Next its next ID to hand out;
	// nil before the first load.
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
	LastLoadLatency        time.Duration
	AvgLoadLatency         time.Duration
	LastLoadAt             time.Time
	LastRequestID          string
	LastError              string
	Issued                 int64 // IDs handed out
	Abandoned              int64 // IDs granted but never handed out (closed buffer)
	Highest                int64 // highest ID ever granted to this buffer
	// Serving is true when the buffer can hand out an ID without waiting.
	Serving bool
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
		LastLoadLatency: c.lastLatency,
		LastLoadAt:      c.lastLoadAt,
		LastRequestID:   c.lastRequestID,
		Issued:          b.issuedLocked(),
		Abandoned:       b.abandoned,
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
		st.Next = s.Last + 1
		if st.Remaining > 0 {
			st.Next = s.Last - st.Remaining + 1
		}
		st.RemainingRatio = float64(st.Remaining) / float64(s.Len())
	}
	if b.next != nil {
		r := b.next.Range
		st.NextRange = &r
	}
	st.Serving = !b.closed && (st.Remaining > 0 || st.NextRange != nil)
	return st
}
