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
	// rttWeight is the weight of the past in the estimate (7/8, as TCP's
	// smoothed RTT, RFC 6298): one slow round trip moves it an eighth of
	// the way, and it falls back within a few dozen round trips once the
	// latency is gone.
	rttWeight = 8
)

// RoundTrip estimates the round trip to the database (an exponentially
// weighted moving average of the round trips seen on the wire) and derives
// timeouts from it: Timeout(floor) = max(floor, Factor × RTT), at most
// Ceiling. A floor tuned for a nearby database then also holds for one a
// WAN away, without tuning by hand, and comes back when the latency goes.
// A nil *RoundTrip measures nothing and returns the floor. It is safe for
// concurrent use.
type RoundTrip struct {
	factor  float64
	ceiling time.Duration

	mu      sync.Mutex // protects srtt, samples and connect
	srtt    time.Duration
	samples int64
	// connect is the floor of the connect timeout when the store bounds
	// connects by it (0: it does not).
	connect time.Duration
}

// NewRoundTrip returns an estimator whose timeouts are factor round trips
// (DefaultRoundTripFactor when factor <= 0), at most ceiling
// (DefaultTimeoutCeiling when ceiling <= 0).
func NewRoundTrip(factor float64, ceiling time.Duration) *RoundTrip {
	if factor <= 0 {
		factor = DefaultRoundTripFactor
	}
	if ceiling <= 0 {
		ceiling = DefaultTimeoutCeiling
	}
	return &RoundTrip{factor: factor, ceiling: ceiling}
}

// Observe adds one measured round trip. The first sets the estimate.
func (r *RoundTrip) Observe(d time.Duration) {
	if r == nil || d < 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.samples == 0 {
		r.srtt = d
	} else {
		r.srtt += (d - r.srtt) / rttWeight
	}
	r.samples++
}

// Estimate returns the estimated round trip (0 before any sample).
func (r *RoundTrip) Estimate() time.Duration {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.srtt
}

// Timeout returns max(floor, factor × RTT), at most the ceiling (or floor,
// when the floor is above the ceiling: a floor set by hand is never cut).
func (r *RoundTrip) Timeout(floor time.Duration) time.Duration {
	if r == nil {
		return floor
	}
	r.mu.Lock()
	srtt := r.srtt
	r.mu.Unlock()
	return clampTimeout(time.Duration(r.factor*float64(srtt)), floor, r.ceiling)
}

// clampTimeout bounds d to [floor, max(floor, ceiling)].
func clampTimeout(d, floor, ceiling time.Duration) time.Duration {
	return max(floor, min(d, ceiling))
}

// RoundTripStatus is a RoundTrip's estimate and the timeouts it gives.
type RoundTripStatus struct {
	// RTT is the estimated round trip; Samples how many it was made of.
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
	srtt, n, connect := r.srtt, r.samples, r.connect
	r.mu.Unlock()
	s := RoundTripStatus{RTT: srtt, Samples: n, FetchTimeout: r.Timeout(fetchFloor)}
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
