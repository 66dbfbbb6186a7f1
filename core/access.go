package core

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// AuthMode says who may ask for IDs.
type AuthMode string

// The modes of the ID routes (/id, /ids, the range routes /v1/segments and
// any route wrapped in IDAccess). The admin routes (the rest of /v1/) always
// need a token with the admin scope.
const (
	// AuthOpen serves IDs to anyone who reaches the port (the default);
	// per-address rate limits apply if configured.
	AuthOpen AuthMode = "open"
	// AuthToken serves IDs only to a bearer token whose scope covers the
	// tag; per-token rate limits apply if configured.
	AuthToken AuthMode = "token"
)

// TokenLister lists the bearer tokens, revoked ones included; an
// token.Store is one.
type TokenLister interface {
	ListTokens(ctx context.Context) ([]token.Token, error)
}

// AuthConfig configures access control. The zero value serves IDs openly,
// serves /metrics, /id/health and /id/dashboard openly, and refuses every
// admin request (no token is known).
type AuthConfig struct {
	// Tokens is where tokens are read from; nil knows none.
	Tokens TokenLister
	// IDs is the mode of the ID routes (default AuthOpen).
	IDs AuthMode
	// ProtectMonitoring makes /metrics, /id/health and /id/dashboard need a
	// token with the monitor (or admin) scope.
	ProtectMonitoring bool
	// Refresh is how old the in-memory copy of the tokens may get before a
	// request reads them again (default 1s): while the token store
	// answers, a new or revoked token takes effect within it.
	Refresh time.Duration
	// MaxStale is how long after the last successful read the copy may
	// still be used while the token store cannot be read (default 30s, at
	// least Refresh): past it every token is refused with 503, since
	// nothing can tell whether it was revoked meanwhile. A revocation thus
	// takes effect on every instance within MaxStale whatever happens to
	// the store; a token once seen revoked is never accepted again.
	MaxStale time.Duration
	// LoginSession is how long a login at /id/login lasts (default
	// DefaultLoginSession): the login cookie is refused after it, and a
	// shorter setting shortens the sessions already made.
	LoginSession time.Duration
}

// DefaultMaxStale is AuthConfig.MaxStale's default.
const DefaultMaxStale = 30 * time.Second

// DefaultLoginSession is AuthConfig.LoginSession's default: a working day.
const DefaultLoginSession = 12 * time.Hour

// principal is a valid token, with its scopes parsed for quick checks.
type principal struct {
	token    token.Token
	admin    bool
	monitor  bool
	allIDs   bool
	tags     map[string]struct{}
	prefixes []string
	// limiter bounds the IDs per second of this token; nil: unlimited.
	limiter *rate.Limiter
}

func newPrincipal(t token.Token) *principal {
	p := &principal{token: t, tags: map[string]struct{}{}}
	for _, s := range t.Scopes {
		switch {
		case s == "admin":
			p.admin = true
		case s == "monitor":
			p.monitor = true
		case s == "ids", s == "ids:*":
			p.allIDs = true
		case strings.HasPrefix(s, "ids:") && strings.HasSuffix(s, "*"):
			p.prefixes = append(p.prefixes, s[len("ids:"):len(s)-1])
		case strings.HasPrefix(s, "ids:"):
			p.tags[s[len("ids:"):]] = struct{}{}
		}
	}
	return p
}

// allowsTag reports whether the token may take IDs of tag.
func (p *principal) allowsTag(tag string) bool {
	if p.allIDs {
		return true
	}
	if _, ok := p.tags[tag]; ok {
		return true
	}
	for _, pre := range p.prefixes {
		if strings.HasPrefix(tag, pre) {
			return true
		}
	}
	return false
}

// hasIDScope reports whether the token may take IDs of some tag.
func (p *principal) hasIDScope() bool {
	return p.allIDs || len(p.tags) > 0 || len(p.prefixes) > 0
}

// monitorOnly reports whether the token's only scope is monitor: the one
// kind of token a login session may stand for, since a browser keeps the
// cookie, and one that could take IDs or administer would be worth
// stealing.
func (p *principal) monitorOnly() bool {
	return p.monitor && !p.admin && !p.hasIDScope()
}

// tokenSet is one read of the tokens: the valid ones by ID, as of the
// last successful read (readAt); at is when the last read was tried. byID
// is nil when no read has succeeded yet. revoked holds every token ID ever
// seen revoked, carried from set to set: a revocation is final, even if a
// later read (from a lagging replica after a failover) shows the token
// unrevoked.
type tokenSet struct {
	at      time.Time
	readAt  time.Time
	byID    map[string]*principal
	revoked map[string]struct{}
}

// authenticator checks bearer tokens against an in-memory copy of the
// token table, read again when older than refresh by the one request that
// finds it so (the others use the copy they have).
type authenticator struct {
	src      TokenLister
	refresh  time.Duration
	maxStale time.Duration // how long the copy serves while reads fail
	timeout  time.Duration
	now      func() time.Time
	newLimit func(token.Token) *rate.Limiter // nil limiter: not rate limited

	set atomic.Pointer[tokenSet]
	mu  sync.Mutex // held by the request reading the tokens
	// revokedHere holds the IDs of the tokens revoked through this
	// instance's admin API (string → struct{}): refused at once, whatever
	// the copy says and whether or not the store can be read.
	revokedHere sync.Map
}

// revoke refuses the token id from now on (see revokedHere).
func (a *authenticator) revoke(id string) { a.revokedHere.Store(id, struct{}{}) }

// expire makes the next request read the tokens again, as after a
// refresh interval: a token just created works at once.
func (a *authenticator) expire() {
	for {
		s := a.set.Load()
		if s == nil {
			return
		}
		next := *s
		next.at = time.Time{}
		if a.set.CompareAndSwap(s, &next) {
			return
		}
	}
}

// current returns the token set, reading it first if it is older than
// refresh. Its byID is nil when the tokens could never be read; a failed
// read is tried again after refresh, not at every request.
func (a *authenticator) current(ctx context.Context) *tokenSet {
	s := a.set.Load()
	if s != nil && a.now().Sub(s.at) < a.refresh {
		return s
	}
	if s != nil && !a.mu.TryLock() {
		return s // another request is reading; the old copy will do
	}
	if s == nil {
		a.mu.Lock() // nothing to serve from: wait for the first read
	}
	defer a.mu.Unlock()
	if s2 := a.set.Load(); s2 != s && s2 != nil {
		return s2 // read while this request waited
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
	defer cancel()
	start := a.now()
	tokens, err := a.src.ListTokens(ctx)
	if err != nil {
		// Keep the old copy (or none) for another interval: the store is
		// failing, and requests must not queue on it.
		failed := &tokenSet{at: start}
		if s != nil {
			failed.readAt, failed.byID, failed.revoked = s.readAt, s.byID, s.revoked
		}
		a.set.Store(failed)
		return failed
	}
	next := &tokenSet{at: start, readAt: start, byID: make(map[string]*principal, len(tokens)), revoked: map[string]struct{}{}}
	if s != nil {
		for id := range s.revoked {
			next.revoked[id] = struct{}{}
		}
	}
	for _, t := range tokens {
		if t.RevokedAt != nil {
			next.revoked[t.ID] = struct{}{}
		}
	}
	for _, t := range tokens {
		if _, revoked := next.revoked[t.ID]; revoked {
			continue
		}
		p := newPrincipal(t)
		if s != nil {
			if old := s.byID[t.ID]; old != nil {
				p.limiter = old.limiter // keep its budget across reads
			}
		}
		if p.limiter == nil && a.newLimit != nil {
			p.limiter = a.newLimit(t)
		}
		next.byID[t.ID] = p
	}
	a.set.Store(next)
	return next
}

// authenticate returns the principal of the caller's bearer token, or
// the 401 (or 503) to answer.
func (a *authenticator) authenticate(ctx context.Context, who Caller) (*principal, *Error) {
	h := who.Bearer()
	if h == "" {
		return nil, unauthorized("", "this route needs a bearer token: Authorization: Bearer idm_…")
	}
	scheme, bearer, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return nil, unauthorized("invalid_request", "use the Bearer scheme: Authorization: Bearer idm_…")
	}
	return a.check(ctx, strings.TrimSpace(bearer))
}

// check returns the principal of a token, or the 401 (or 503) to answer:
// the one check of a bearer token and of the login form's token alike.
func (a *authenticator) check(ctx context.Context, raw string) (*principal, *Error) {
	id, secret, ok := token.Parse(raw)
	if !ok {
		return nil, unauthorized("invalid_token", "malformed bearer token")
	}
	p, err := a.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if !p.token.Matches(secret) {
		return nil, unauthorized("invalid_token", "invalid or revoked bearer token")
	}
	return p, nil
}

// lookup returns the principal of the valid token whose ID is id, or the
// 401 (or 503) to answer; the caller proves it holds the token (the
// secret, or a login session signed with its hash). A token revoked is
// refused whatever else happens: login sessions end with their token.
func (a *authenticator) lookup(ctx context.Context, id string) (*principal, *Error) {
	if a == nil || a.src == nil {
		return nil, unauthorized("invalid_token", "invalid or revoked bearer token")
	}
	if _, revoked := a.revokedHere.Load(id); revoked {
		return nil, unauthorized("invalid_token", "invalid or revoked bearer token")
	}
	set := a.current(ctx)
	if set != nil {
		if _, revoked := set.revoked[id]; revoked {
			return nil, unauthorized("invalid_token", "invalid or revoked bearer token")
		}
	}
	// A copy older than maxStale might still hold a token revoked since:
	// the store cannot tell, so neither 200 nor 401.
	if a.stale(set) {
		return nil, errTokensUnchecked
	}
	p := set.byID[id]
	if p == nil {
		return nil, unauthorized("invalid_token", "invalid or revoked bearer token")
	}
	return p, nil
}

// errTokensUnchecked is the 503 of a token that cannot be checked.
var errTokensUnchecked = NewError(wire.CodeUnavailable, "tokens cannot be checked right now: the store cannot be reached; retry later")

// stale reports whether set cannot answer for a token: no read has
// succeeded, or the last one is older than maxStale.
func (a *authenticator) stale(set *tokenSet) bool {
	return set == nil || set.byID == nil || a.now().Sub(set.readAt) > a.maxStale
}

// checkable returns the 503 to answer when no token can be checked now,
// whatever the token: the login form answers it before it looks at the
// token, so that its reply never tells a token seen revoked from one never
// seen. Nil when tokens can be checked (or none is known at all).
func (a *authenticator) checkable(ctx context.Context) *Error {
	if a == nil || a.src == nil || !a.stale(a.current(ctx)) {
		return nil
	}
	return errTokensUnchecked
}

// unauthorized is a 401 with its WWW-Authenticate challenge (RFC 6750);
// bearerErr is the challenge's error attribute, empty when no token came.
func unauthorized(bearerErr, message string) *Error {
	challenge := `Bearer realm="idmint"`
	if bearerErr != "" {
		challenge += `, error="` + bearerErr + `"`
	}
	e := NewError(wire.CodeUnauthorized, message)
	e.Challenge = challenge
	return e
}

func forbidden(message string) *Error {
	return NewError(wire.CodeForbidden, message)
}

// tagForbidden is the 403 of a token whose scopes do not cover tag: it
// names the tag and the scopes that would, so that the caller knows what
// to ask for.
func tagForbidden(tag string) *Error {
	tag = truncate(tag, 64)
	return forbidden(fmt.Sprintf("this token's scopes do not cover biz_tag %q: it needs scope ids:%s, ids, or an ids:PREFIX* that matches it", tag, tag))
}
