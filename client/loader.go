package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/wire"
)

// APIError is an error answer from an idmint instance: the error
// wire.DecodeError read from it (which errors.Is matches to every sentinel
// of its code, ErrUnknownTag among them), with where it came from.
type APIError struct {
	URL     string
	Status  int
	Code    string // the stable machine-readable code, e.g. "unknown_tag"
	Message string // the instance's, for people (a 403 names the scope the tag needs)
	Tag     string // the biz_tag of the request
	err     error  // wire.DecodeError's
}

func (e *APIError) Error() string {
	msg := e.Message
	if e.Tag != "" && !strings.Contains(msg, strconv.Quote(e.Tag)) {
		msg = fmt.Sprintf("biz_tag %q: %s", e.Tag, msg)
	}
	return fmt.Sprintf("idmint %s: %d %s: %s", e.URL, e.Status, e.Code, msg)
}

// Unwrap returns the decoded error, so that errors.Is matches the
// sentinels of its code (ErrUnknownTag, ErrInvalidTag).
func (e *APIError) Unwrap() error { return e.err }

// Is reports ErrUnauthorized and ErrForbidden by status: the client's own
// sentinels, for any refusal of the token.
func (e *APIError) Is(target error) bool {
	return (target == ErrUnauthorized && e.Status == http.StatusUnauthorized) ||
		(target == ErrForbidden && e.Status == http.StatusForbidden)
}

// settled reports whether the answer says that nothing was granted for the
// request, now or later: a refusal of the request itself, or a tag that
// cannot grant. Any other error may hide a grant, and is retried.
func (e *APIError) settled() bool {
	switch {
	case e.Status == http.StatusTooManyRequests, e.Status == http.StatusRequestTimeout:
		return false
	case e.Status >= 400 && e.Status < 500:
		return true
	}
	return e.Code == wire.CodeRolledBack || e.Code == wire.CodeExhausted
}

// final reports whether the answer is the caller's as it is: the request
// itself is refused (a 4xx other than 408 and 429: 400 bad input, 401 the
// token, 403 its scopes, 404 the tag), and asking again, here or on
// another instance, cannot change it. It never reads as ErrUnavailable
// (see callerErr).
func (e *APIError) final() bool {
	return e.settled() && e.Status >= 400 && e.Status < 500
}

// notOurs reports whether the answer says that the request ID is settled
// without a range for this client: another caller holds it, it was used for
// another tag, or its range was given back in full.
func (e *APIError) notOurs() bool {
	switch e.Code {
	case wire.CodeNotHolder, wire.CodeRequestConflict, wire.CodeGivenBack:
		return true
	}
	return false
}

// rangeSource is the segment.Source of one stint's Set: the range
// endpoints of the instances of the stint's region, and of no other,
// tried in turn. A grant request is idempotent by its request ID and
// holder key, so its lookup is the same request: it answers the range
// granted before (Recovered), or grants it now if nothing committed.
type rangeSource struct {
	c  *Client
	st *stint
}

var _ segment.Source = rangeSource{}

// Grant sends req to every instance of the region once, starting with the
// one that answered last, and classifies the first answer. Once the
// client left the region as down, it sends nothing.
func (g rangeSource) Grant(ctx context.Context, req segment.Ask) (segment.Grant, error) {
	if g.st.down.Load() {
		return segment.Grant{}, g.st.refusal()
	}
	if err := g.c.conflictRefusal(); err != nil {
		return segment.Grant{}, err
	}
	gr, err := g.grant(ctx, req)
	g.st.settle(req, err)
	return gr, err
}

// grant is Grant's request and the class of its answer.
func (g rangeSource) grant(ctx context.Context, req segment.Ask) (segment.Grant, error) {
	// The floor is the highest ID the region granted the client for the
	// tag: a database that went back in time below it is raised to it, so
	// that the range granted is one the buffer serves. Another region's
	// IDs lie in another share: its floor is never sent here.
	r := g.st.region
	gr, share, err := g.c.round(ctx, r, req, max(req.Floor, g.st.set.Floor(req.Tag), r.floor(req.Tag)))
	var refused *APIError
	switch {
	case err == nil:
		// A range whose share may overlap another region's is not served:
		// it is a gap, and the client serves nothing more.
		if err := g.c.shares.check(g.c.regions, r, gr.First, gr.Last, share); err != nil {
			g.c.refuseAll(err)
			return segment.Grant{}, segment.Classify(segment.ErrRefused, err)
		}
		r.raise(req.Tag, gr.Last)
		g.c.lastFrom.Store(req.Tag, r.name)
		return gr, nil
	case errors.As(err, &refused) && refused.notOurs():
		// The request ID is another caller's (claimed before any attempt
		// of ours committed: ours would carry our holder key) or its range
		// was given back: nothing of ours is granted under it. It is
		// settled, never resumed; the Set goes on with a new request.
		return segment.Grant{}, segment.Classify(segment.ErrNotHeld, err)
	case errors.As(err, &refused) && refused.settled():
		return segment.Grant{}, segment.Classify(segment.ErrRefused, err)
	}
	// No answer, or one that may hide a grant: look it up (send it again).
	if ctx.Err() == nil {
		g.c.cannotGrant(g.st, req.Tag, err)
	}
	return segment.Grant{}, segment.Classify(segment.ErrAmbiguous, err)
}

// Lookup sends req again, to the same region: see rangeSource. Once the
// client left the region as down, it sends nothing: the ask is given up.
func (g rangeSource) Lookup(ctx context.Context, req segment.Ask) (segment.Grant, error) {
	if g.st.down.Load() {
		return segment.Grant{}, g.st.refusal()
	}
	return g.Grant(ctx, req)
}

// GiveBack gives back r, the unused tail of req's range, to the region
// that granted it; once the client left that region as down, it is not
// sent, and r is a gap (counted in RegionStats.Gap).
func (g rangeSource) GiveBack(ctx context.Context, req segment.Ask, r segment.Range) (bool, error) {
	if g.st.down.Load() {
		return false, fmt.Errorf("region %q: %w", g.st.region.name, errRegionLeft)
	}
	return g.c.giveBack(ctx, g.st.region, req, r)
}

// round sends req to every instance of r once, starting with the one that
// answered last, and returns the first answer, with the share it carried.
func (c *Client) round(ctx context.Context, r *region, req segment.Ask, floor int64) (segment.Grant, *wire.Share, error) {
	n := len(r.urls)
	start := int(r.preferred.Load())
	var errs []error
	for i := range n {
		u := (start + i) % n
		g, share, err := c.grant(ctx, r.urls[u], req, floor)
		var refused *APIError
		if err == nil || (errors.As(err, &refused) && refused.settled()) {
			r.preferred.Store(int64(u))
			return g, share, err
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return segment.Grant{}, nil, errors.Join(errs...)
}

// grant sends one range request to the instance at base, and returns the
// range and the share of the region that granted it (nil: none sent).
func (c *Client) grant(ctx context.Context, base string, req segment.Ask, floor int64) (segment.Grant, *wire.Share, error) {
	c.requests.Add(1)
	tag := req.Tag
	var reply wire.SegmentResponse
	// The request is idempotent by its request ID; saying so lets the
	// transport resend it by itself when a kept-alive connection turns out
	// dead. The holder key goes in the body only, never in a header.
	body := wire.SegmentRequest{Tag: tag, Size: req.Size, RequestID: req.ID.String(), HolderKey: req.Key, Floor: floor}
	err := c.post(ctx, base+wire.PathSegments, body, &reply, "Idempotency-Key", req.ID.String())
	if err != nil {
		return segment.Grant{}, nil, withTag(err, tag)
	}
	if reply.RequestID != req.ID.String() || reply.Tag != tag || reply.First < 1 || reply.Last < reply.First {
		return segment.Grant{}, nil, fmt.Errorf("idmint %s answered request %s for %q with request %s for %q, range [%d, %d]",
			base, req.ID, tag, reply.RequestID, reply.Tag, reply.First, reply.Last)
	}
	return segment.Grant{
		Range:     segment.Range{First: reply.First, Last: reply.Last},
		MinStep:   reply.Step,
		MaxStep:   reply.MaxStep,
		RequestID: reply.RequestID,
		Recovered: reply.Recovered,
		// The tag's own runway replaces Config.Runway in the buffer when
		// above 0, as in an instance's (segment.Grant.Runway).
		Runway: runwayOf(reply.RunwaySeconds),
	}, reply.Region, nil
}

// giveBack returns r, the unused tail of req's range, with req's holder
// key. It moves on to the next instance only when the request certainly did
// not reach the last one (no connection, or an instance shutting down): a
// give-back that may have been applied is never sent twice.
func (c *Client) giveBack(ctx context.Context, reg *region, req segment.Ask, r segment.Range) (bool, error) {
	body := wire.GiveBackRequest{Tag: req.Tag, RequestID: req.ID.String(), HolderKey: req.Key, First: r.First, Last: r.Last}
	n := len(reg.urls)
	start := int(reg.preferred.Load())
	var errs []error
	for i := range n {
		var reply wire.GiveBackResponse
		err := withTag(c.post(ctx, reg.urls[(start+i)%n]+wire.PathGiveBack, body, &reply), req.Tag)
		if err == nil {
			return reply.GivenBack, nil
		}
		errs = append(errs, err)
		var opErr *net.OpError
		var refused *APIError
		notSent := (errors.As(err, &opErr) && opErr.Op == "dial") ||
			(errors.As(err, &refused) && refused.Code == wire.CodeShuttingDown)
		if !notSent || ctx.Err() != nil {
			break
		}
	}
	return false, errors.Join(errs...)
}

// withTag sets tag on err when it is an instance's answer.
func withTag(err error, tag string) error {
	var refused *APIError
	if errors.As(err, &refused) {
		refused.Tag = tag
	}
	return err
}

// maxReply bounds the body read from an instance.
const maxReply = 64 << 10

// post sends body as JSON to url, with the header name-value pairs, within
// one AttemptTimeout, and decodes a 200 reply into out; any other reply
// becomes an *APIError.
func (c *Client) post(ctx context.Context, url string, body, out any, header ...string) error {
	js, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(js))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return fmt.Errorf("read reply of %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		err := wire.DecodeError(resp.StatusCode, resp.Header.Get("Retry-After"), data)
		e, _ := errors.AsType[*wire.Error](err)
		return &APIError{URL: url, Status: resp.StatusCode, Code: e.Code, Message: e.Message, err: err}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode reply of %s: %w", url, err)
	}
	return nil
}

// maxRunway bounds a tag's runway taken from a reply, as the schemas do
// (allocator.MaxRunway): a reply past it is read as the bound.
const maxRunway = 24 * time.Hour

// runwayOf converts a reply's runway_seconds to a duration; a negative or
// non-number value (an instance that cannot mean it) reads as 0, which
// keeps the client's own runway.
func runwayOf(seconds float64) time.Duration {
	switch {
	case !(seconds > 0):
		return 0
	case seconds >= maxRunway.Seconds():
		return maxRunway
	}
	return time.Duration(math.Round(seconds*1000)) * time.Millisecond
}
