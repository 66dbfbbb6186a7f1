package allocator

import (
	"sync"
	"time"
)

// Round-trip defaults: a timeout is DefaultRoundTripFactor round trips,
// never less than the floor it is asked with, never more than
// DefaultTimeoutCeiling.
const (
	// DefaultRoundTripFactor covers the worst attempt: a new connection
	// (TCP, TLS or not, SCRAM: up to five round trips), then the statement
	// and the replication checks, each prepared and run (six or more).
	DefaultRoundTripFactor = 20
	DefaultTimeoutCeiling  = 30 * time.Second
	// RoundTripWindow is how long a round trip seen stays a candidate for
	// the estimate, BBR's min-RTT window: a rise in the network's latency
	// (a failover to a far region) is followed within it; a fall at once.
	RoundTripWindow = 10 * time.Second
	// rttSlots divides the window: the estimator keeps the least round
	// trip of each slot, so it forgets the old ones a slot at a time, in
	// fixed memory, whatever the rate of exchanges.
	rttSlots   = 5
	rttSlotLen = RoundTripWindow / rttSlots
)

// RoundTrip estimates the network's round trip to the database and
// derives timeouts from it: Timeout(floor) = max(floor, Factor × RTT), at
// most Ceiling. A floor tuned for a nearby database then also holds for
// one a WAN away, without tuning by hand, and comes back when the latency
// goes. A nil *RoundTrip measures nothing and returns the floor. It is safe
// for concurrent use.
//
// What it is fed is the time of exchanges on the wire: a request and the
// first bytes of its reply. That is the network's round trip plus whatever
// the server did before it answered: run a statement, wait for a row lock
// another transaction holds, sleep. Server time only ever adds to an
// exchange, so the estimate is the least exchange seen within the last
// RoundTripWindow (a windowed minimum, as BBR's min-RTT filter): a slow
// statement, or a caller's give-back waiting on a lock, cannot raise it and
// so lengthen every timeout, where an average would count it as distance.
// A pool's own exchanges that wait on nothing (begin, prepare, the ping
// after an idle spell, a connect's handshakes) come every few seconds on
// any connection in use, and give the network's round trip. A database
// truly far away makes every exchange long, the least as well: its
// timeouts grow as before. When no round trip was seen for a whole window
// the last one known is kept, until the next.
type RoundTrip struct {
	factor  float64
	ceiling time.Duration
	now     func() time.Time

	mu sync.Mutex // protects slots, cur, used, samples and connect
	// slots is a ring of the least round trip seen in each slot of the
	// window: slots[cur] the newest, used of them filled.
	slots   [rttSlots]rttSlot
	cur     int
	used    int
	samples int64
	// connect is the floor of the connect timeout when the store bounds
	// connects by it (0: it does not).
	connect time.Duration
}

// rttSlot is the least round trip seen from start, for rttSlotLen.
type rttSlot struct {
	start time.Time
	least time.Duration
}

// NewRoundTrip returns an estimator whose timeouts are factor round trips
// (DefaultRoundTripFactor when factor <= 0), at most ceiling
// (DefaultTimeoutCeiling when ceiling <= 0).
func NewRoundTrip(factor float64, ceiling time.Duration) *RoundTrip {
	return NewRoundTripClock(factor, ceiling, time.Now)
}

// NewRoundTripClock is NewRoundTrip with the clock that ages round trips
// out of the window (time.Now when nil).
func NewRoundTripClock(factor float64, ceiling time.Duration, now func() time.Time) *RoundTrip {
	if factor <= 0 {
		factor = DefaultRoundTripFactor
	}
	if ceiling <= 0 {
		ceiling = DefaultTimeoutCeiling
	}
	if now == nil {
		now = time.Now
	}
	return &RoundTrip{factor: factor, ceiling: ceiling, now: now}
}

// Observe adds one measured exchange: a round trip and the server's time.
func (r *RoundTrip) Observe(d time.Duration) {
	if r == nil || d < 0 {
		return
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := &r.slots[r.cur]; r.used > 0 && now.Sub(s.start) < rttSlotLen {
		s.least = min(s.least, d)
	} else {
		r.cur = (r.cur + 1) % rttSlots
		r.slots[r.cur] = rttSlot{start: now, least: d}
		r.used = min(r.used+1, rttSlots)
	}
	r.samples++
}

// estimateLocked is the least round trip of the slots still in the window,
// or of the newest when none is (0 before any sample).
func (r *RoundTrip) estimateLocked() time.Duration {
	if r.used == 0 {
		return 0
	}
	now := r.now()
	least := r.slots[r.cur].least
	for i := 1; i < r.used; i++ {
		if s := r.slots[(r.cur-i+rttSlots)%rttSlots]; now.Sub(s.start) < RoundTripWindow {
			least = min(least, s.least)
		}
	}
	return least
}

// Estimate returns the estimated round trip (0 before any sample).
func (r *RoundTrip) Estimate() time.Duration {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.estimateLocked()
}

// Timeout returns max(floor, factor × RTT), at most the ceiling (or floor,
// when the floor is above the ceiling: a floor set by hand is never cut).
func (r *RoundTrip) Timeout(floor time.Duration) time.Duration {
	if r == nil {
		return floor
	}
	return clampTimeout(time.Duration(r.factor*float64(r.Estimate())), floor, r.ceiling)
}

// clampTimeout bounds d to [floor, max(floor, ceiling)].
func clampTimeout(d, floor, ceiling time.Duration) time.Duration {
	return max(floor, min(d, ceiling))
}

// RoundTripStatus is a RoundTrip's estimate and the timeouts it gives.
type RoundTripStatus struct {
	// RTT is the estimated round trip; Samples how many exchanges were
	// observed.
	RTT     time.Duration
	Samples int64
	// FetchTimeout bounds one store call of a segment fetch.
	FetchTimeout time.Duration
	// ConnectTimeout bounds one connection attempt per host (0: the store
	// does not bound connects by the round trip).
	ConnectTimeout time.Duration
}

// SetConnectFloor makes the store's connects bounded by Timeout(floor).
func (r *RoundTrip) SetConnectFloor(floor time.Duration) {
	r.mu.Lock()
	r.connect = floor
	r.mu.Unlock()
}

// status reports the estimate and the timeouts derived with fetchFloor.
func (r *RoundTrip) status(fetchFloor time.Duration) RoundTripStatus {
	if r == nil {
		return RoundTripStatus{FetchTimeout: fetchFloor}
	}
	r.mu.Lock()
	rtt, n, connect := r.estimateLocked(), r.samples, r.connect
	r.mu.Unlock()
	s := RoundTripStatus{RTT: rtt, Samples: n, FetchTimeout: r.Timeout(fetchFloor)}
	if connect > 0 {
		s.ConnectTimeout = r.Timeout(connect)
	}
	return s
}

// attemptTimeout bounds one store call of a load: AttemptTimeout, or more
// when the round trip asks for it.
func (a *Allocator) attemptTimeout() time.Duration {
	return a.cfg.RoundTrip.Timeout(a.cfg.AttemptTimeout)
}

// MaxGiveBackTimeout bounds one give-back's store call (a caller's range
// tail, an instance's at shutdown), whatever the round trip and the
// attempt timeout: a give-back holds the tag's row lock (on SQLite, the
// file's write lock) from its first statement to its commit, and every
// grant of the tag waits behind it, so no estimate, however it was fooled,
// may stretch that. 5 s is some sixteen round trips to a database 150 ms
// away each way, where a new connection and the give-back's transaction
// take about ten; nearby, a give-back takes milliseconds. One that does
// not finish in time is rolled back (or committed without its answer):
// either way its caller serves none of the IDs, a gap at worst.
const MaxGiveBackTimeout = 5 * time.Second

// giveBackTimeout bounds one give-back: the attempt timeout, at most
// MaxGiveBackTimeout.
func (a *Allocator) giveBackTimeout() time.Duration {
	return min(a.attemptTimeout(), MaxGiveBackTimeout)
}

// loadAttempts is how many attempts (an allocation, the lookup of a lost
// reply, another) one load is given time for, at least.
const loadAttempts = 3

// loadTimeout bounds one load: floor (segment.Config.LoadTimeout), or
// loadAttempts attempt timeouts when that is more.
func (a *Allocator) loadTimeout(floor time.Duration) time.Duration {
	return max(floor, loadAttempts*a.attemptTimeout())
}

// coldWait bounds a cold tag's first wait: wait (segment.Config.WaitTimeout),
// or as long as one fetch attempt may take at the round trip measured
// (Factor × RTT, the adaptive part of the attempt timeout) when that is
// more. A nearby database leaves wait; one a WAN away, where a first fetch
// on a new connection takes several round trips, raises it.
func (a *Allocator) coldWait(wait time.Duration) time.Duration {
	return a.cfg.RoundTrip.Timeout(wait)
}

// RoundTrip reports the store's estimated round trip and the timeouts it
// gives (fixed ones when Config.RoundTrip is nil).
func (a *Allocator) RoundTrip() RoundTripStatus {
	return a.cfg.RoundTrip.status(a.cfg.AttemptTimeout)
}

// Timeout returns floor, or more when the round trip to the store asks for
// it: for callers that bound their own store calls (a health check's ping).
func (a *Allocator) Timeout(floor time.Duration) time.Duration {
	return a.cfg.RoundTrip.Timeout(floor)
}
