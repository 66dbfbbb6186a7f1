package core

import (
	"errors"
	"math"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/ratelimit"
	"github.com/idmint/idmint/wire"
)

// Limits bounds what one client can cost. Zero fields take the defaults
// named; rate limits are off unless set.
type Limits struct {
	// IDsPerSecondPerToken bounds the IDs each token takes per second, in
	// the token mode (0: unlimited). /ids counts its count, not 1, and
	// POST /v1/segments the IDs it grants. A token made with a rate of its
	// own (Token.IDsPerSecond) is bound by that instead. Each valid token
	// has one limiter, kept with its entry in the token cache: the state is
	// bounded by the tokens an admin made, and a bearer that is not a valid
	// token makes none.
	IDsPerSecondPerToken float64
	// IDsPerSecondPerAddress bounds the IDs each client address (addrKey:
	// an IPv6 address by its /64) takes per second, in the open mode (0:
	// unlimited, the default: behind a proxy every client has the proxy's
	// address).
	IDsPerSecondPerAddress float64
	// RangeGrantsPerSecond bounds the requests to POST /v1/segments and
	// /v1/segments/giveback, each a write to the store, per client address
	// in the open mode and per token in the token mode, with a burst of
	// two seconds' worth (0: unlimited; idmint serve sets 20). A client
	// takes one range every few seconds per tag at most.
	RangeGrantsPerSecond float64
	// LoginAttemptsPerMinute bounds the POSTs to /id/login (under
	// AuthConfig.ProtectMonitoring) per client address (addrKey) and
	// minute, with a burst of as many (0: unlimited; idmint serve sets
	// 10): a person mistypes a few times, a script trying tokens is slowed
	// to a crawl. Behind a proxy all clients share its budget.
	LoginAttemptsPerMinute float64
	// FloorLeadPerSecond bounds what the floors callers claim on POST
	// /v1/segments may cost: the lead, the IDs a grant skips when it raises
	// the tag's max_id to the caller's floor, per client address (addrKey)
	// in the open mode and per token in the token mode, with a burst of
	// allocator.MaxClaimedLead, one grant's most (0: the default,
	// DefaultFloorLeadPerSecond; there is no "unlimited"). The lead counts
	// against the ID limits above as well, as IDs granted, and one grant's
	// lead is bounded by what they hold. A floor above the tag's max_id
	// while either budget is spent is refused with 429, and grants nothing.
	FloorLeadPerSecond float64
	// MaxAddresses bounds the addresses (and, for RangeGrantsPerSecond and
	// FloorLeadPerSecond, the tokens) tracked by each limit (default 10,000); when it is full,
	// idle ones are dropped and new ones share one budget.
	MaxAddresses int
	// MaxQueryBytes bounds a request's query string (default 2048): 414.
	MaxQueryBytes int
	// MaxBodyBytes bounds a request body (default 64 KiB): 413.
	MaxBodyBytes int64
	// ReadHeaderTimeout (default 5s) and ReadTimeout (default 10s) bound
	// reading a request's header and the whole request: a client that
	// sends slowly is disconnected. WriteTimeout (default RequestTimeout +
	// 5s) bounds a reply; IdleTimeout (default 2m) a kept-alive connection;
	// MaxHeaderBytes (default 16 KiB) the header, request line included.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                            int
}

// DefaultFloorLeadPerSecond is Limits.FloorLeadPerSecond's default: 10^8
// IDs of lead a second per principal, so that one principal cannot move a
// tag past 2^53 (where a JavaScript number stops holding every integer) in
// under a year at idmint serve's defaults, whose ID limits are off:
//
//	leads:  10^8/s (+ one burst of 2^32, once)
//	ranges: 20 grants/s (--range-grants-per-second) x 10^6 (the default max_step) = 2*10^7/s
//	2^53 / (1.2*10^8/s) = 7.5*10^7 s, about 2.4 years (the leads alone: 2.85 years)
//
// and exhausting 2^63 takes 2,400 years. Before it, a claimed floor cost
// up to 2^32 a grant, 20 grants a second: 2^53 in 29 hours. A real
// rollback of L IDs below a client's floor is repaired by that client in
// about (L - 2^32) / 10^8 seconds (an hour's grants at 10^6 IDs/s: none),
// or at once by an operator's bump.
const DefaultFloorLeadPerSecond = 100_000_000

func (l *Limits) setDefaults(requestTimeout time.Duration) {
	if l.FloorLeadPerSecond <= 0 {
		l.FloorLeadPerSecond = DefaultFloorLeadPerSecond
	}
	if l.MaxAddresses <= 0 {
		l.MaxAddresses = 10_000
	}
	if l.MaxQueryBytes <= 0 {
		l.MaxQueryBytes = 2048
	}
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = 64 << 10
	}
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = 5 * time.Second
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = 10 * time.Second
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = requestTimeout + 5*time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 2 * time.Minute
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 16 << 10
	}
}

// newLimiter returns a limiter of perSecond IDs whose burst admits one
// request of the largest count.
func newLimiter(perSecond float64, maxCount int) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(perSecond), burstOf(perSecond, maxCount))
}

// burstOf is the burst of an ID limit: a second's worth, and at least one
// request of the largest count.
func burstOf(perSecond float64, maxCount int) int {
	return max(int(math.Ceil(perSecond)), maxCount)
}

// take charges n IDs to l, or returns the 429 to answer, with the wait in
// Retry-After. A refused request is not charged.
func take(l *rate.Limiter, n int, now time.Time) *Error {
	_, err := reserve(l, n, now)
	return err
}

// reserve is take, returning the charge so that it can be settled later.
func reserve(l *rate.Limiter, n int, now time.Time) (*rate.Reservation, *Error) {
	res := l.ReserveN(now, n)
	if !res.OK() {
		return nil, rateLimited(time.Second)
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return nil, rateLimited(d)
	}
	return res, nil
}

// idCharge is the charge of a request that learns how many IDs it took only
// once it has them (POST /v1/segments): reserved up front for what it asked,
// settled at what it got. A grant with a floor also takes up front the lead
// its floor may raise max_id by (maxLead) from the floor-lead budget, bounded
// by what the ID limit holds, and gives back what it did not take.
type idCharge struct {
	l   *rate.Limiter // the ID limit; nil: none applies
	res *rate.Reservation
	// reserved is what res holds: the IDs asked, at most l's burst.
	reserved int64
	// lead is the floor-lead budget (nil: no floor claimed), maxLead what
	// was taken of it.
	lead    *ratelimit.Bucket
	maxLead int64
	now     time.Time
	clock   func() time.Time
}

// chargeIDs charges a call of the range operations: one write of the
// range budget (rangeLimits) and asked IDs (at least 1, at most the
// limiter's burst) of the ID limit that applies to the caller: its token's
// in the token mode (p, admitted), its address's in the open mode. A grant
// that claims a floor also takes its lead (see idCharge). It returns the
// 429 to answer when the write or the IDs are spent; a refused call is
// charged nothing.
func (c *Core) chargeIDs(who Caller, p *principal, asked int64, floor bool) (*idCharge, *Error) {
	ch := &idCharge{now: c.cfg.Now(), clock: c.cfg.Now}
	if c.cfg.Auth.IDs == AuthToken {
		if p != nil {
			ch.l = p.limiter
		}
	} else if c.addrLimits != nil {
		ch.l = c.addrLimits.limiter(who.Host(), ch.now)
	}
	write, err := reserveWrite(c.rangeLimits, who, p, ch.now)
	if err != nil {
		return nil, err
	}
	if ch.l != nil {
		ch.reserved = min(max(asked, 1), int64(ch.l.Burst()))
		res, err := reserve(ch.l, int(ch.reserved), ch.now)
		if err != nil {
			if write != nil {
				write.CancelAt(ch.now)
			}
			return nil, err
		}
		ch.res = res
	}
	if floor {
		// The lead is IDs taken: at most what the floor-lead budget holds,
		// and what the ID limit holds beyond the size reserved (read, not
		// reserved: the lead is owed to it once known).
		n := int64(allocator.MaxClaimedLead)
		if ch.l != nil {
			n = min(n, int64(ch.l.TokensAt(ch.now)))
		}
		if ch.lead = c.leadLimits.limiter(who, p, ch.now); ch.lead != nil {
			ch.maxLead = ch.lead.TakeUpTo(ch.now, n)
		}
	}
	return ch, nil
}

// settle makes the charge exactly got IDs and a lead of lead (at most
// maxLead): the floor-lead budget gets back what the lead did not take; the
// ID limit is owed got + lead, past the burst if need be (later requests
// wait it off). Nothing taken costs nothing.
func (c *idCharge) settle(got, lead int64) {
	now := c.clock()
	if c.lead != nil {
		c.lead.Give(now, c.maxLead-lead)
	}
	if c.l == nil {
		return
	}
	if got != c.reserved {
		// A rate.Limiter cancels only at the time it reserved (which
		// credits again the refill since, when others charged it
		// meanwhile): only when the size differs from what was asked.
		c.res.CancelAt(c.now)
		owe(c.l, got, c.now)
	}
	owe(c.l, lead, now)
}

// unsureLead is the lead to charge for a grant that failed with err: its
// whole maxLead when the grant may have committed (ambiguous, or committed
// but not confirmed on the standbys), else none. A lead that may have been
// taken is counted as taken.
func (c *idCharge) unsureLead(err error) int64 {
	if errors.Is(err, allocator.ErrAmbiguous) || errors.Is(err, allocator.ErrNotReplicated) {
		return c.maxLead
	}
	return 0
}

// floorRefused is the 429 of a grant refused because its floor is above the
// tag's max_id while it had no lead (allocator.ErrFloorBudget), once settled
// at nothing: its Retry-After is when the floor-lead budget holds an ID
// again, and the ID limit one beyond the size asked.
func (c *idCharge) floorRefused() *Error {
	now := c.clock()
	var wait time.Duration
	if c.lead != nil {
		wait = c.lead.Wait(now, 1)
	}
	if c.l != nil {
		if short := float64(min(max(c.reserved, 1)+1, int64(c.l.Burst()))) - c.l.TokensAt(now); short > 0 {
			wait = max(wait, time.Duration(math.Ceil(short/float64(c.l.Limit())*float64(time.Second))))
		}
	}
	e := rateLimited(wait)
	e.Message = floorRefusedMessage
	return e
}

const floorRefusedMessage = "floor: the tag's max_id is below the floor claimed, and this caller's budget for raising it (its floor lead, or its IDs per second) is spent; nothing granted; retry after the time in Retry-After"

// owe charges n to l at now, past the burst if need be, in pieces of at most
// the burst.
func owe(l *rate.Limiter, n int64, now time.Time) {
	for n > 0 {
		k := min(n, int64(l.Burst()))
		l.ReserveN(now, int(k))
		n -= k
	}
}

func rateLimited(wait time.Duration) *Error {
	e := NewError(wire.CodeRateLimited, "too many ids asked for; retry after the time in Retry-After")
	e.RetryAfter = max(wait, time.Second)
	return e
}

// chargeToken charges n IDs to p's limiter, if it has one.
func chargeToken(p *principal, n int, now time.Time) *Error {
	if p.limiter == nil {
		return nil
	}
	return take(p.limiter, n, now)
}

// addrLimits holds one limiter per client address (addrKey), at most
// MaxAddresses of them, each request in O(1) however many addresses come
// (ratelimit.Table). When full, an idle limiter (its budget full again) is
// dropped for a new address, which loses nothing; when the least recently
// used ones are all busy, new addresses share one budget. Cycling addresses
// thus never resets a busy address's budget: an address holding a grudge
// gets at most its own limit, plus a share of the overflow budget.
type addrLimits struct {
	table *ratelimit.Table[netip.Addr, *rate.Limiter]
}

func newAddrLimits(perSecond float64, maxCount, maxAddrs int) *addrLimits {
	if perSecond <= 0 {
		return nil
	}
	return &addrLimits{table: ratelimit.New[netip.Addr](perSecond, burstOf(perSecond, maxCount), maxAddrs)}
}

func (a *addrLimits) charge(addr string, n int, now time.Time) *Error {
	return take(a.limiter(addr, now), n, now)
}

func (a *addrLimits) limiter(addr string, now time.Time) *rate.Limiter {
	return a.table.Get(addrKey(addr), now)
}

// addrKey is the key of a client address (clientAddr) in the per-address
// limits. An IPv4 address counts whole; an IPv6 address by its /64, the
// smallest prefix a network gives one subscriber or link (RFC 6177): the
// low 64 bits are the host's own to choose (privacy addresses, RFC 8981),
// so keyed whole one host would be millions of clients. An IPv4-mapped
// IPv6 address is its IPv4 address. Whatever does not parse (a Unix
// socket's peer) shares one key.
func addrKey(addr string) netip.Addr {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Addr{}
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		a = p.Addr()
	}
	return a
}

// principalLimits is one budget per principal: per client address
// (addrKey) in the open mode and per token in the token mode. One of its
// tables is nil, by the mode; a nil *principalLimits limits nothing. The
// range endpoints have two: the writes to the store they make, one a grant
// (a row of the segment log) or a give-back, so that a flood of them is
// refused before it reaches the database (rangeLimits), and the leads of
// the floors their callers claim (leadLimits), settled once known.
type principalLimits[L any] struct {
	byAddr  *ratelimit.Table[netip.Addr, L]
	byToken *ratelimit.Table[string, L]
}

// newRangeLimits returns the range limits of l in mode, or nil when
// l.RangeGrantsPerSecond is 0. The burst is two seconds' worth.
func newRangeLimits(l Limits, mode AuthMode) *principalLimits[*rate.Limiter] {
	per := l.RangeGrantsPerSecond
	if per <= 0 {
		return nil
	}
	burst := max(int(math.Ceil(2*per)), 1)
	if mode == AuthToken {
		return &principalLimits[*rate.Limiter]{byToken: ratelimit.New[string](per, burst, l.MaxAddresses)}
	}
	return &principalLimits[*rate.Limiter]{byAddr: ratelimit.New[netip.Addr](per, burst, l.MaxAddresses)}
}

// newLeadLimits returns the floor-lead limits of l in mode: a second's
// worth of l.FloorLeadPerSecond, and at least one grant's most lead.
func newLeadLimits(l Limits, mode AuthMode) *principalLimits[*ratelimit.Bucket] {
	per := l.FloorLeadPerSecond
	burst := max(int(math.Ceil(per)), allocator.MaxClaimedLead)
	if mode == AuthToken {
		return &principalLimits[*ratelimit.Bucket]{byToken: ratelimit.NewBuckets[string](per, burst, l.MaxAddresses)}
	}
	return &principalLimits[*ratelimit.Bucket]{byAddr: ratelimit.NewBuckets[netip.Addr](per, burst, l.MaxAddresses)}
}

// limiter returns the budget of p (the token mode) or of the caller's
// address (the open mode): nil when g is nil, or without a principal in the token mode
// (not reached: IDAccess refuses a request without a token).
func (g *principalLimits[L]) limiter(who Caller, p *principal, now time.Time) L {
	var none L
	switch {
	case g == nil:
		return none
	case g.byToken != nil:
		if p == nil {
			return none
		}
		return g.byToken.Get(p.token.ID, now)
	}
	return g.byAddr.Get(addrKey(who.Host()), now)
}

// reserveWrite takes one write of the range budget g of p or of the
// caller's address, or returns the 429 to answer. It returns a nil reservation when
// nothing is limited.
func reserveWrite(g *principalLimits[*rate.Limiter], who Caller, p *principal, now time.Time) (*rate.Reservation, *Error) {
	l := g.limiter(who, p, now)
	if l == nil {
		return nil, nil
	}
	res, err := reserve(l, 1, now)
	if err != nil {
		err.Message = "too many range requests (grants and give-backs); retry after the time in Retry-After"
	}
	return res, err
}

// loginLimits bounds the login attempts (POST /id/login) per client
// address (addrKey), each one a token check, so that the form is no way to
// try tokens at speed. A nil *loginLimits limits nothing.
type loginLimits struct {
	byAddr *ratelimit.Table[netip.Addr, *rate.Limiter]
}

// newLoginLimits returns the login limits of l, or nil when
// l.LoginAttemptsPerMinute is 0. The burst is a minute's worth.
func newLoginLimits(l Limits) *loginLimits {
	per := l.LoginAttemptsPerMinute
	if per <= 0 {
		return nil
	}
	return &loginLimits{byAddr: ratelimit.New[netip.Addr](per/60, max(int(math.Ceil(per)), 1), l.MaxAddresses)}
}

// charge takes one attempt of the address host's budget, or returns the
// 429 to answer, with the wait in Retry-After.
func (g *loginLimits) charge(host string, now time.Time) *Error {
	if g == nil {
		return nil
	}
	err := take(g.byAddr.Get(addrKey(host), now), 1, now)
	if err != nil {
		err.Message = "too many login attempts from your address; try again after " + strconv.Itoa(RetrySeconds(err.RetryAfter)) + " s"
	}
	return err
}

// RetrySeconds is a wait in the whole seconds of Retry-After, rounded up,
// at least 1.
func RetrySeconds(wait time.Duration) int {
	return max(int(math.Ceil(wait.Seconds())), 1)
}
