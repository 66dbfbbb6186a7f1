package lease

import "errors"

// Errors of the lease stores, besides snowflake's ErrAllHeld and ErrLeaseLost.
var (
	// ErrOutcomeUnknown means a write's COMMIT failed, so the acquire, renewal
	// or release may be on disk all the same. A caller must not count on
	// either outcome: an acquired worker ID stays held until its lease
	// expires, which is why a failed acquire only costs a worker ID for a
	// TTL and never hands one out twice.
	ErrOutcomeUnknown = errors.New("lease write outcome unknown")
)
