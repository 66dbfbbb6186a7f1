package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// The admin operations: every one needs a token with the admin scope. A
// body's decoding error (bad) is answered once the caller is admitted.

// AdminOn reports whether the tag operations are served; TokensOn the
// token operations; StandbysOn the standby operations.
func (c *Core) AdminOn() bool    { return c.cfg.Admin != nil }
func (c *Core) TokensOn() bool   { return c.cfg.TokenAdmin != nil }
func (c *Core) StandbysOn() bool { return c.cfg.Replication != nil && c.cfg.Admin != nil }

func (c *Core) admin(ctx context.Context, who Caller) (*principal, error) {
	return c.requireScope(ctx, who, "admin", func(p *principal) bool { return p.admin })
}

// tokenName names the token of an admin call, for the log.
func tokenName(p *principal) string {
	if p == nil {
		return ""
	}
	return p.token.Name + " (" + p.token.ID + ")"
}

// TagOf is t as the admin API shows it.
func TagOf(t allocator.Tag) wire.Tag {
	maxStep := t.MaxStep
	if maxStep == 0 {
		maxStep = segment.DefaultMaxStep
	}
	return wire.Tag{Tag: t.Name, MaxID: t.MaxID, Step: t.Step, MaxStep: maxStep, Description: t.Description,
		RunwaySeconds: t.Runway.Seconds()}
}

// RunwayOf converts a runway in seconds, as the admin API takes it, to a
// duration in whole milliseconds. A value past allocator.MaxRunway comes
// back just past it, for the store to refuse with its bounds, instead of
// overflowing.
func RunwayOf(seconds float64) time.Duration {
	if seconds > allocator.MaxRunway.Seconds() {
		return allocator.MaxRunway + time.Millisecond
	}
	if seconds < 0 {
		return -time.Millisecond
	}
	return time.Duration(math.Round(seconds*1000)) * time.Millisecond
}

// ListTags lists the tags.
func (c *Core) ListTags(ctx context.Context, who Caller) (wire.Tags, error) {
	if _, err := c.admin(ctx, who); err != nil {
		return wire.Tags{}, err
	}
	tags, err := c.cfg.Admin.Tags(ctx)
	if err != nil {
		return wire.Tags{}, err
	}
	out := wire.Tags{Tags: make([]wire.Tag, 0, len(tags))}
	for _, t := range tags {
		out.Tags = append(out.Tags, TagOf(t))
	}
	return out, nil
}

// CreateTag creates a tag. A step or max_step given must be at least 1.
func (c *Core) CreateTag(ctx context.Context, who Caller, req wire.CreateTagRequest, bad error) (wire.Tag, error) {
	p, err := c.admin(ctx, who)
	if err != nil {
		return wire.Tag{}, err
	}
	if bad != nil {
		return wire.Tag{}, bad
	}
	spec := allocator.TagSpec{Name: req.Tag, Start: req.Start, Description: req.Description, Runway: RunwayOf(req.RunwaySeconds)}
	for _, f := range []struct {
		name string
		in   *int64
		out  *int64
	}{{"step", req.Step, &spec.Step}, {"max_step", req.MaxStep, &spec.MaxStep}} {
		if f.in == nil {
			continue
		}
		if *f.in < 1 {
			return wire.Tag{}, fmt.Errorf("%w: %s %d: want at least 1 (leave it out for the default)", allocator.ErrInvalidSpec, f.name, *f.in)
		}
		*f.out = *f.in
	}
	t, err := c.cfg.Admin.CreateTag(ctx, spec)
	if err != nil {
		return wire.Tag{}, err
	}
	c.cfg.Logger.Info("tag created over the admin API", "biz_tag", t.Name, "step", t.Step, "token", tokenName(p))
	return TagOf(t), nil
}

// GetTag returns the tag name.
func (c *Core) GetTag(ctx context.Context, who Caller, name string) (wire.Tag, error) {
	if _, err := c.admin(ctx, who); err != nil {
		return wire.Tag{}, err
	}
	t, err := c.findTag(ctx, name)
	if err != nil {
		return wire.Tag{}, err
	}
	return TagOf(t), nil
}

// UpdateTag changes the fields req gives of the tag name.
func (c *Core) UpdateTag(ctx context.Context, who Caller, name string, req wire.PatchTagRequest, bad error) (wire.Tag, error) {
	p, err := c.admin(ctx, who)
	if err != nil {
		return wire.Tag{}, err
	}
	if bad != nil {
		return wire.Tag{}, bad
	}
	t, err := c.findTag(ctx, name)
	if err == nil && (req.Step != nil || req.MaxStep != nil) {
		step, maxStep := t.Step, t.MaxStep
		if req.Step != nil {
			step = *req.Step
		}
		if req.MaxStep != nil {
			maxStep = *req.MaxStep
		}
		t, err = c.cfg.Admin.SetStep(ctx, t.Name, step, maxStep)
	}
	if err == nil && req.Description != nil {
		t, err = c.cfg.Admin.Describe(ctx, t.Name, *req.Description)
	}
	if err == nil && req.RunwaySeconds != nil {
		t, err = c.cfg.Admin.SetRunway(ctx, t.Name, RunwayOf(*req.RunwaySeconds))
	}
	if err != nil {
		return wire.Tag{}, err
	}
	c.cfg.Logger.Info("tag changed over the admin API", "biz_tag", t.Name, "step", t.Step, "max_step", t.MaxStep, "runway", t.Runway, "token", tokenName(p))
	return TagOf(t), nil
}

// BumpTag raises the tag's max_id to req.To or by req.By; a bump that
// raises nothing says so.
func (c *Core) BumpTag(ctx context.Context, who Caller, name string, req wire.BumpRequest, bad error) (wire.Tag, error) {
	p, err := c.admin(ctx, who)
	if err != nil {
		return wire.Tag{}, err
	}
	if bad != nil {
		return wire.Tag{}, bad
	}
	t, err := c.findTag(ctx, name)
	if err == nil {
		t, err = c.cfg.Admin.Bump(ctx, t.Name, req.To, req.By)
	}
	if errors.Is(err, allocator.ErrNotRaised) {
		return wire.Tag{}, fmt.Errorf("%w: nothing changed", err)
	}
	if err != nil {
		return wire.Tag{}, err
	}
	c.cfg.Logger.Warn("tag bumped over the admin API", "biz_tag", t.Name, "max_id", t.MaxID, "token", tokenName(p))
	return TagOf(t), nil
}

// findTag returns the tag name.
func (c *Core) findTag(ctx context.Context, name string) (allocator.Tag, error) {
	if err := allocator.ValidateTag(name); err != nil {
		return allocator.Tag{}, err
	}
	tags, err := c.cfg.Admin.Tags(ctx)
	if err != nil {
		return allocator.Tag{}, err
	}
	for _, t := range tags {
		if t.Name == name {
			return t, nil
		}
	}
	return allocator.Tag{}, fmt.Errorf("%w: %q", allocator.ErrUnknownTag, name)
}

// TokenOf is t as the admin API shows it: never its secret, never its
// hash.
func TokenOf(t token.Token) wire.Token {
	scopes := t.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	return wire.Token{ID: t.ID, Name: t.Name, Scopes: scopes, IDsPerSecond: t.IDsPerSecond, CreatedAt: t.CreatedAt, RevokedAt: t.RevokedAt}
}

// shownOnce is CreatedToken.Note.
const shownOnce = "the secret is shown this once: keep it now; idmint stores only its hash and can never show it again"

// ListTokens lists the tokens, revoked ones included.
func (c *Core) ListTokens(ctx context.Context, who Caller) (wire.Tokens, error) {
	if _, err := c.admin(ctx, who); err != nil {
		return wire.Tokens{}, err
	}
	list, err := c.cfg.TokenAdmin.ListTokens(ctx)
	if err != nil {
		return wire.Tokens{}, err
	}
	out := wire.Tokens{Tokens: make([]wire.Token, 0, len(list))}
	for _, t := range list {
		out.Tokens = append(out.Tokens, TokenOf(t))
	}
	return out, nil
}

// CreateToken makes a token, with the CLI's checks (name, scopes, rate):
// nothing is stored on failure. It works at once on this instance (on the
// others within the refresh interval).
func (c *Core) CreateToken(ctx context.Context, who Caller, req wire.CreateTokenRequest, bad error) (wire.CreatedToken, error) {
	p, err := c.admin(ctx, who)
	if err != nil {
		return wire.CreatedToken{}, err
	}
	if bad != nil {
		return wire.CreatedToken{}, bad
	}
	tok, secret, err := token.New(req.Name, req.Scopes)
	if err == nil {
		err = token.ValidateRate(req.IDsPerSecond)
	}
	if err == nil {
		tok.IDsPerSecond = req.IDsPerSecond
		tok, err = c.cfg.TokenAdmin.CreateToken(ctx, tok)
	}
	if err != nil {
		return wire.CreatedToken{}, err
	}
	c.auth.expire()
	c.cfg.Logger.Info("token created over the admin API", "token_id", tok.ID, "name", tok.Name, "scopes", tok.Scopes, "by", tokenName(p))
	return wire.CreatedToken{Token: TokenOf(tok), Secret: secret, Note: shownOnce}, nil
}

// RevokeToken revokes a token. It is idempotent: revoking a revoked token
// answers the time of the first revocation; an unknown ID is
// token.ErrUnknown. A whole token where its ID belongs is revoked, since
// it has now been sent where an ID goes; it is never quoted back.
func (c *Core) RevokeToken(ctx context.Context, who Caller, id string) (wire.Token, error) {
	p, err := c.admin(ctx, who)
	if err != nil {
		return wire.Token{}, err
	}
	if tid, _, ok := token.Parse(id); ok {
		id = tid
	}
	t, err := c.cfg.TokenAdmin.RevokeToken(ctx, id)
	if err != nil {
		return wire.Token{}, err
	}
	// Refused at once on this instance, even if the store becomes
	// unreachable before the next read (the others: within
	// AuthConfig.MaxStale at worst).
	c.auth.revoke(t.ID)
	c.cfg.Logger.Warn("token revoked over the admin API", "token_id", t.ID, "name", t.Name, "by", tokenName(p))
	return TokenOf(t), nil
}

// ListStandbys lists the standbys idmint remembers.
func (c *Core) ListStandbys(ctx context.Context, who Caller) (wire.Standbys, error) {
	if _, err := c.admin(ctx, who); err != nil {
		return wire.Standbys{}, err
	}
	recs, err := c.cfg.Replication.Standbys(ctx)
	if err != nil {
		return wire.Standbys{}, err
	}
	if recs == nil {
		recs = []wire.StandbyRecord{}
	}
	return wire.Standbys{Standbys: recs}, nil
}

// ForgetStandby forgets the standby name: it no longer holds grants back
// until it is seen streaming again.
func (c *Core) ForgetStandby(ctx context.Context, who Caller, name string) error {
	p, err := c.admin(ctx, who)
	if err != nil {
		return err
	}
	if name == "" || len(name) > 200 {
		return NewError(wire.CodeBadRequest, "standby name: 1 to 200 characters")
	}
	err = c.cfg.Replication.ForgetStandby(ctx, name)
	if errors.Is(err, allocator.ErrNotFound) {
		return NewError(wire.CodeNotFound, "no standby of that name is remembered (or it is forgotten already)")
	}
	if err != nil {
		return err
	}
	c.cfg.Logger.Warn("standby forgotten over the admin API: it no longer holds grants back until it is seen streaming again",
		"standby", truncate(name, maxLogged), "token", tokenName(p))
	return nil
}
