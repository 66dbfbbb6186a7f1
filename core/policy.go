package core

import (
	"context"

	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/token"
)

// Access names the access control an operation sits behind.
type Access int

const (
	// AccessOpen asks no token (an operation may still charge a limit).
	AccessOpen Access = iota
	// AccessIDs is the ID operations': a token whose scope covers the tag
	// in the token mode; the IDs charged to the token or the address.
	AccessIDs
	// AccessAdmin is the admin operations': a token with the admin scope,
	// always.
	AccessAdmin
	// AccessMonitoring is health's: a token with the monitor (or admin)
	// scope under ProtectMonitoring.
	AccessMonitoring
)

// Precheck returns the refusal that access control a answers the caller
// whatever its call holds, from its credentials alone: where a needs a
// token, none, or a malformed, unknown or revoked one; for the admin
// operations also a token without the admin scope; nil otherwise. It
// charges no limit and checks no tag's scope (the tag is in the body): the
// operation does that, once it runs. An adapter calls it before it reads a call's body or message,
// so that a caller the operation would refuse costs no inflating or
// parsing (invariant 8).
func (c *Core) Precheck(ctx context.Context, who Caller, a Access) error {
	switch {
	case !c.Prechecks(a):
		return nil
	case a == AccessAdmin:
		_, err := c.admin(ctx, who)
		return err
	}
	if _, err := c.auth.authenticate(ctx, who); err != nil {
		return c.refuse(err)
	}
	return nil
}

// Prechecks reports whether Precheck of a can refuse a caller: a transport
// need not make a call of what it cannot (the open mode's IDs) before its
// message.
func (c *Core) Prechecks(a Access) bool {
	return a == AccessAdmin || a == AccessIDs && c.cfg.Auth.IDs == AuthToken ||
		a == AccessMonitoring && c.cfg.Auth.ProtectMonitoring
}

// Principal is a caller's valid token, as access control resolved it.
type Principal struct{ p *principal }

// Token is the principal's token (its hash included, never its secret).
func (p Principal) Token() token.Token { return p.p.token }

// MonitorOnly reports whether the token's only scope is monitor: the one
// kind of token a browser's login session may stand for.
func (p Principal) MonitorOnly() bool { return p.p.monitorOnly() }

// Admin reports whether the token has the admin scope.
func (p Principal) Admin() bool { return p.p.admin }

// Monitor reports whether the token may read the monitoring routes.
func (p Principal) Monitor() bool { return p.p.monitor || p.p.admin }

// CheckToken returns the principal of a raw token (idm_…), or the 401 (or
// 503) to answer: the login form's check, the same as a bearer token's.
func (c *Core) CheckToken(ctx context.Context, raw string) (Principal, error) {
	p, err := c.auth.check(ctx, raw)
	if err != nil {
		return Principal{}, err
	}
	return Principal{p}, nil
}

// LookupToken returns the principal of the valid token whose ID is id: the
// caller proved it holds the token otherwise (a login session signed with
// its hash).
func (c *Core) LookupToken(ctx context.Context, id string) (Principal, error) {
	p, err := c.auth.lookup(ctx, id)
	if err != nil {
		return Principal{}, err
	}
	return Principal{p}, nil
}

// TokensCheckable returns the 503 to answer when no token can be checked
// now, whatever the token; nil when tokens can be checked (or none is
// known at all).
func (c *Core) TokensCheckable(ctx context.Context) error {
	if err := c.auth.checkable(ctx); err != nil {
		return err
	}
	return nil
}

// ChargeLogin takes one login attempt of the address host, or returns the
// 429 to answer (Limits.LoginAttemptsPerMinute).
func (c *Core) ChargeLogin(host string) error {
	if err := c.loginLimits.charge(host, c.cfg.Now()); err != nil {
		return c.refuse(err)
	}
	return nil
}

// Authorize resolves the caller of an operation behind a and checks it:
// the principal of its token when a needs one (admin: the admin scope;
// monitoring: monitor or admin), nil in the open mode. For AccessIDs it
// checks what admitIDs checks, with a tag not known yet and nothing
// charged: the token needs some ID scope (AuthorizeTag checks the tag
// once it is known).
func (c *Core) Authorize(ctx context.Context, who Caller, a Access) (*Principal, error) {
	var p *principal
	var err error
	switch a {
	case AccessIDs:
		p, err = c.admitIDs(ctx, who, "", 0)
	case AccessAdmin:
		p, err = c.requireScope(ctx, who, "admin", func(p *principal) bool { return p.admin })
	case AccessMonitoring:
		if !c.cfg.Auth.ProtectMonitoring {
			return nil, nil
		}
		p, err = c.requireScope(ctx, who, "monitor", func(p *principal) bool { return p.monitor || p.admin })
	}
	if err != nil || p == nil {
		return nil, err
	}
	return &Principal{p}, nil
}

// AuthorizeTag checks that the principal (Authorize's, nil in the open
// mode) may take IDs of tag.
func (c *Core) AuthorizeTag(p *Principal, tag string) error {
	var pp *principal
	if p != nil {
		pp = p.p
	}
	return c.authorizeTag(pp, tag)
}

// requireScope returns the principal of a valid token whose scopes pass
// ok, or the 401/403 to answer.
func (c *Core) requireScope(ctx context.Context, who Caller, name string, ok func(*principal) bool) (*principal, error) {
	p, err := c.auth.authenticate(ctx, who)
	if err != nil {
		return nil, c.refuse(err)
	}
	if !ok(p) {
		return nil, c.refuse(forbidden("this token's scopes do not include " + name))
	}
	return p, nil
}

// admitIDs is the access control of the ID operations: nothing in the open
// mode but the address's limit; in the token mode a valid token, whose
// scope covers tag when tag is a valid name (otherwise it needs some ID
// scope, and the operation answers the bad tag, or checks the tag it
// learns later with authorizeTag). It charges n IDs (0: none) to the
// token's or the address's limit. It returns the principal (nil in the
// open mode).
func (c *Core) admitIDs(ctx context.Context, who Caller, tag string, n int) (*principal, error) {
	if c.cfg.Auth.IDs != AuthToken {
		if c.addrLimits != nil {
			if err := c.addrLimits.charge(who.Host(), n, c.cfg.Now()); err != nil {
				return nil, c.refuse(err)
			}
		}
		return nil, nil
	}
	p, err := c.auth.authenticate(ctx, who)
	if err != nil {
		return nil, c.refuse(err)
	}
	if tag != "" && segment.ValidateTag(tag) == nil {
		if !p.allowsTag(tag) {
			return nil, c.refuse(tagForbidden(tag))
		}
	} else if !p.hasIDScope() {
		return nil, c.refuse(forbidden("this token has no ID scope"))
	}
	if err := chargeToken(p, n, c.cfg.Now()); err != nil {
		return nil, c.refuse(err)
	}
	return p, nil
}

// AdmitIDs is the access control of the ID operations, for routes a
// program adds beside idmint's (httpapi.IDAccess): tag is the one the call
// names (""; not known yet), n the IDs it asks for, charged.
func (c *Core) AdmitIDs(ctx context.Context, who Caller, tag string, n int) (*Principal, error) {
	p, err := c.admitIDs(ctx, who, tag, n)
	if err != nil || p == nil {
		return nil, err
	}
	return &Principal{p}, nil
}

// authorizeTag checks, once an operation learns its tag from its body,
// that p (admitIDs') may take IDs of tag.
func (c *Core) authorizeTag(p *principal, tag string) error {
	if c.cfg.Auth.IDs != AuthToken {
		return nil
	}
	if p == nil {
		return c.refuse(unauthorized("", "this route needs a bearer token: Authorization: Bearer idm_…"))
	}
	if !p.allowsTag(tag) {
		return c.refuse(tagForbidden(tag))
	}
	return nil
}

// asked is how many IDs a call asks for, for the rate limits: a count of
// at least 1, at most MaxCount; 1 otherwise.
func (c *Core) asked(count int) int {
	if count >= 1 {
		return min(count, c.cfg.MaxCount)
	}
	return 1
}

// Unauthorized is a 401 with its RFC 6750 challenge (bearerErr is its
// error attribute, "" when no token came); Forbidden a 403: for the
// refusals an adapter makes itself (a login session, a cross-origin form).
func Unauthorized(bearerErr, message string) *Error { return unauthorized(bearerErr, message) }

// Forbidden: see Unauthorized.
func Forbidden(message string) *Error { return forbidden(message) }
