package core

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/ratelimit"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/token"
)

// Allocator is what the core needs from an allocator.Allocator.
type Allocator interface {
	Next(ctx context.Context, tag string) (int64, error)
	NextRanges(ctx context.Context, tag string, n int, dst []segment.Range) ([]segment.Range, error)
	Stats() []segment.Stats
	TagStats(ctx context.Context, tag string) (segment.Stats, error)
	Ping(ctx context.Context) error
	// SegmentGranter serves the range operations.
	SegmentGranter
	// RoundTrip and Timeout: the database's measured round trip, and
	// timeouts that follow it (allocator.RoundTrip).
	RoundTrip() allocator.RoundTripStatus
	Timeout(floor time.Duration) time.Duration
}

var _ Allocator = (*allocator.Allocator)(nil)

// SegmentGranter is what the range operations need (part of Allocator):
// allocator.Allocator implements it.
type SegmentGranter interface {
	GrantRange(ctx context.Context, req allocator.RangeRequest) (allocator.Segment, bool, error)
	GiveBackRange(ctx context.Context, id uuid.UUID, h allocator.Holder, tag string, first, last int64) (bool, error)
}

// TagAdmin is what the admin operations need to manage tags: an
// allocator.Admin (every allocator.Store is one).
type TagAdmin = allocator.Admin

// Config configures a Core. Zero fields take the defaults named.
type Config struct {
	Allocator Allocator
	// Instance names this process in the health document.
	Instance string
	// Tags are listed in the health document from the start (idmint serve
	// --tag), with their state, even before this instance loads them.
	Tags []string
	// MaxCount bounds the count of NextIDs and NextSnowflakes (default
	// 1000).
	MaxCount int
	// RequestTimeout bounds the time a call may wait (default 5s); the
	// Limits' default WriteTimeout follows it.
	RequestTimeout time.Duration
	// PingTimeout bounds the database check of Health (default 1s).
	PingTimeout time.Duration
	// Replication, when set, reports the database's standbys in Health and
	// serves the standby operations (with Admin).
	Replication ReplicationSource
	// Snowflake serves the Snowflake operations; nil leaves them out.
	Snowflake Snowflake
	// Auth controls who may ask for IDs, read health and administer.
	Auth AuthConfig
	// Limits bounds what one caller can cost.
	Limits Limits
	// Admin, when set, serves the tag operations.
	Admin TagAdmin
	// TokenAdmin, when set, serves the token operations: the store
	// Auth.Tokens reads.
	TokenAdmin token.Store
	// TLS is what Health says of the listener.
	TLS TLSHealth
	// Region, when set, is this instance's region: Health reports it, and
	// its conflict makes the instance unavailable.
	Region RegionSource
	Logger *slog.Logger
	Now    func() time.Time
	// OnRefused, when set, is called with the code of every refusal the
	// core makes (idmint_http_refused_total counts them).
	OnRefused func(code string)
	// OnFloor, when set, is told of every grant whose claimed floor raised
	// max_id (lead IDs skipped), or was refused for want of budget.
	OnFloor func(tag string, lead int64, refused bool)
	// OnCall, when set, records one call of a transport that is no route
	// of the HTTP API's router (see Observe).
	OnCall func(name string, status int, elapsed time.Duration)
}

// Core is every operation of idmint, whatever transport carries it: IDs,
// ranges and give-backs, Snowflake, the admin operations, health. Each
// takes the call's context and its Caller, applies the access control and
// the limits of its kind, and returns a typed result or an error of Rules.
type Core struct {
	cfg Config

	auth        *authenticator
	addrLimits  *addrLimits
	rangeLimits *principalLimits[*rate.Limiter]
	leadLimits  *principalLimits[*ratelimit.Bucket]
	loginLimits *loginLimits
	// fast: IDs are open and no address is limited, so an ID call asks
	// nothing of access control (the hot path pays one branch).
	fast bool
}

// New returns the core over cfg.Allocator.
func New(cfg Config) *Core {
	if cfg.MaxCount <= 0 {
		cfg.MaxCount = 1000
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Limits.setDefaults(cfg.RequestTimeout)
	a := cfg.Auth
	if a.IDs == "" {
		cfg.Auth.IDs = AuthOpen
	}
	if a.Refresh <= 0 {
		a.Refresh = time.Second
	}
	if a.MaxStale <= 0 {
		a.MaxStale = DefaultMaxStale
	}
	if cfg.Auth.LoginSession <= 0 {
		cfg.Auth.LoginSession = DefaultLoginSession
	}
	c := &Core{cfg: cfg}
	c.auth = &authenticator{src: a.Tokens, refresh: a.Refresh, maxStale: max(a.MaxStale, a.Refresh),
		timeout: max(cfg.PingTimeout, time.Second), now: cfg.Now}
	per := cfg.Limits.IDsPerSecondPerToken
	c.auth.newLimit = func(t token.Token) *rate.Limiter {
		switch {
		case t.IDsPerSecond > 0: // the token's own bound, above or below the instance's
			return newLimiter(t.IDsPerSecond, cfg.MaxCount)
		case per > 0:
			return newLimiter(per, cfg.MaxCount)
		}
		return nil
	}
	c.loginLimits = newLoginLimits(cfg.Limits)
	c.addrLimits = newAddrLimits(cfg.Limits.IDsPerSecondPerAddress, cfg.MaxCount, cfg.Limits.MaxAddresses)
	c.rangeLimits = newRangeLimits(cfg.Limits, cfg.Auth.IDs)
	c.leadLimits = newLeadLimits(cfg.Limits, cfg.Auth.IDs)
	c.fast = cfg.Auth.IDs != AuthToken && c.addrLimits == nil
	return c
}

// Config returns the core's configuration, defaults filled in.
func (c *Core) Config() Config { return c.cfg }

// RequestTimeout bounds one call: Config.RequestTimeout, or as long as one
// store call may take at the database's round trip when that is more (a
// cold tag's first fetch, a range grant, an admin call to a database a WAN
// away), as the allocator's own waits follow it.
func (c *Core) RequestTimeout() time.Duration {
	return c.cfg.Allocator.Timeout(c.cfg.RequestTimeout)
}

// Observe records one call named name (a gRPC procedure's full name,
// "/idmint.v1.IDService/NextID") that took elapsed and answered status,
// in the series the HTTP API keeps per route (httpapi wires Config.OnCall
// to idmint_http_requests_total and its duration histogram): a transport
// of its own, such as a grpc-go listener, calls it once per call, so that
// its procedures are counted as the HTTP port counts the same procedures
// (status 200 for every gRPC answer, an error included, as gRPC sends
// it).
func (c *Core) Observe(name string, status int, elapsed time.Duration) {
	if c.cfg.OnCall != nil {
		c.cfg.OnCall(name, status, elapsed)
	}
}

// refuse counts e when it is a refusal the core makes (its row says so),
// and returns it marked so (Counted): the edges count only the refusals
// made elsewhere. e is made for the call (unauthorized, forbidden and
// rateLimited make a new one), never a shared value.
func (c *Core) refuse(e *Error) *Error {
	if e == nil || !Lookup(e).Refusal {
		return e
	}
	if c.cfg.OnRefused != nil {
		c.cfg.OnRefused(e.Code)
	}
	e.counted = true
	return e
}
