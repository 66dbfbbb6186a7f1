// Package ratelimit keeps one token bucket (a golang.org/x/time/rate
// Limiter) per key, such as a client address or a token, in a table whose
// size is bounded however many keys arrive, and where every request costs
// O(1) whatever the table holds.
//
//	t := ratelimit.New[netip.Addr](10, 100, 10_000) // 10/s, burst 100, 10,000 keys
//	if !t.Get(addr, now).AllowN(now, n) {
//		// refuse
//	}
//
// A full table drops only keys whose bucket is full again (idle), which
// loses nothing: such a key would get a full bucket anyway. When the
// least recently used keys are all busy, a new key shares its shard's
// overflow bucket with the other new keys instead, so that cycling through
// keys never resets a busy key's budget.
package ratelimit
