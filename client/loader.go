package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/segment"
)

// APIError is an error answer from an idmint instance.
type APIError struct {
	URL     string
	Status  int
	Code    string // the stable machine-readable code, e.g. "unknown_tag"
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("idmint %s: %d %s: %s", e.URL, e.Status, e.Code, e.Message)
}

// Is reports ErrUnknownTag and ErrInvalidTag by code, ErrUnauthorized and
// ErrForbidden by status.
func (e *APIError) Is(target error) bool {
	return (target == ErrUnknownTag && e.Code == "unknown_tag") ||
		(target == ErrInvalidTag && e.Code == "invalid_biz_tag") ||
		(target == ErrUnauthorized && e.Status == http.StatusUnauthorized) ||
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
	return e.Code == "rolled_back" || e.Code == "tag_exhausted"
}

// notOurs reports whether the answer says that the request ID is settled
// without a range for this client: another caller holds it, it was used for
// another tag, or its range was given back in full.
func (e *APIError) notOurs() bool {
	switch e.Code {
	case "not_holder", "request_conflict", "given_back":
		return true
	}
	return false
}

// tagLoads is one tag's range requests. Loads of one buffer never overlap,
// but a buffer made again for the tag may load beside its predecessor.
type tagLoads struct {
	tag string

	mu sync.Mutex // protects the fields below
	// pending is a request whose outcome is unknown: every attempt failed
	// before the load gave up. The next load resumes it, so a range
	// granted for it is found and served instead of leaking.
	pending *rangeRequest
	// grants holds the last few grants, newest last: Close gives back a
	// tail by its request ID.
	grants  []grantedRange
	highest int64
}

// rangeRequest is one range request: its request ID, an idempotency key
// that instances log, and its holder key, a secret that proves the range is
// this client's on a retry and at the give-back; the two are chosen
// together before the first attempt and sent again on every retry.
type rangeRequest struct {
	id   uuid.UUID
	key  string
	size int64
}

type grantedRange struct {
	req  rangeRequest
	last int64
}

// newHolderKey returns a fresh holder key: 32 random bytes in unpadded
// base64url.
func newHolderKey() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// keptGrants bounds tagLoads.grants: a buffer holds at most its current,
// its next and one late range.
const keptGrants = 4

// request returns the request to send: the pending one, taken out so that
// no two loads hold it, or a new one with a fresh UUIDv7.
func (t *tagLoads) request(size int64) (rangeRequest, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.pending; p != nil {
		t.pending = nil
		return *p, true, nil
	}
	id, err := uuid.NewV7()
	if err != nil {
		return rangeRequest{}, false, fmt.Errorf("new request id: %w", err)
	}
	return rangeRequest{id: id, key: newHolderKey(), size: size}, false, nil
}

// keep makes req the one the next load resumes. If another load left its
// own, that one is kept and a range granted to req, if any, is a gap.
func (t *tagLoads) keep(req rangeRequest) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending == nil {
		t.pending = &req
	}
}

func (t *tagLoads) granted(req rangeRequest, r segment.Range) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.grants = append(t.grants, grantedRange{req: req, last: r.Last})
	if len(t.grants) > keptGrants {
		t.grants = t.grants[len(t.grants)-keptGrants:]
	}
	t.highest = max(t.highest, r.Last)
}

// requestOf returns the request of the range that ends at last.
func (t *tagLoads) requestOf(last int64) (rangeRequest, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, g := range t.grants {
		if g.last == last {
			return g.req, true
		}
	}
	return rangeRequest{}, false
}

func (t *tagLoads) highestGranted() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.highest
}

// load is the segment.Loader of every buffer. It sends one request ID,
// chosen before the first attempt, to the instances in turn until one
// answers: a grant (the same range on every retry, whichever instance
// answers) or a refusal that grants nothing. When ctx ends first the
// request is kept for the tag's next load.
func (c *Client) load(ctx context.Context, tl *tagLoads, size int64) (segment.Grant, error) {
	req, uncertain, err := tl.request(size)
	if err != nil {
		return segment.Grant{}, err
	}
	var lastErr error
	for round := 0; ; round++ {
		if round > 0 {
			select {
			case <-time.After(c.pause(round)):
			case <-ctx.Done():
				tl.keep(req)
				return segment.Grant{}, fmt.Errorf("request %s unanswered (%w): %w", req.id, ctx.Err(), lastErr)
			}
		}
		g, err := c.round(ctx, tl.tag, req, tl.highestGranted())
		var refused *APIError
		switch {
		case err == nil:
			tl.granted(req, g.Range)
			if g.Recovered {
				c.cfg.Logger.Warn("RECOVERED range by request id after a lost reply",
					"biz_tag", tl.tag, "request_id", req.id, "first", g.First, "last", g.Last)
			}
			return g, nil
		case errors.As(err, &refused) && refused.notOurs():
			// The request ID is another caller's (claimed before any
			// attempt of ours committed: ours would carry our holder
			// key) or its range was given back: nothing of ours is
			// granted under it. It is settled, never resumed; go on with
			// a new request.
			c.cfg.Logger.Warn("request id held by another caller; going on with a new request",
				"biz_tag", tl.tag, "request_id", req.id, "code", refused.Code)
			if req, uncertain, err = tl.request(size); err != nil {
				return segment.Grant{}, err
			}
			lastErr = refused
			continue
		case errors.As(err, &refused) && refused.settled():
			if uncertain {
				// An earlier attempt may still commit: keep its ID.
				tl.keep(req)
			}
			return segment.Grant{}, err
		}
		uncertain = true
		lastErr = err
	}
}

// round sends req to every instance once, starting with the one that
// answered last, and returns the first answer. floor is the highest ID the
// client was granted for the tag: a database that went back in time below
// it is raised to it, so that the range granted is one the buffer serves.
func (c *Client) round(ctx context.Context, tag string, req rangeRequest, floor int64) (segment.Grant, error) {
	n := len(c.urls)
	start := int(c.preferred.Load())
	var errs []error
	for i := range n {
		u := (start + i) % n
		g, err := c.grant(ctx, c.urls[u], tag, req, floor)
		var refused *APIError
		if err == nil || (errors.As(err, &refused) && refused.settled()) {
			c.preferred.Store(int64(u))
			return g, err
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return segment.Grant{}, errors.Join(errs...)
}

type grantBody struct {
	Tag       string `json:"biz_tag"`
	Size      int64  `json:"size"`
	RequestID string `json:"request_id"`
	HolderKey string `json:"holder_key"`
	Floor     int64  `json:"floor,string,omitempty"`
}

type grantReply struct {
	Tag       string `json:"biz_tag"`
	RequestID string `json:"request_id"`
	First     int64  `json:"first,string"`
	Last      int64  `json:"last,string"`
	Step      int64  `json:"step"`
	MaxStep   int64  `json:"max_step"`
	Recovered bool   `json:"recovered"`
}

// grant sends one range request to the instance at base.
func (c *Client) grant(ctx context.Context, base, tag string, req rangeRequest, floor int64) (segment.Grant, error) {
	c.requests.Add(1)
	var reply grantReply
	// The request is idempotent by its request ID; saying so lets the
	// transport resend it by itself when a kept-alive connection turns out
	// dead. The holder key goes in the body only, never in a header.
	body := grantBody{Tag: tag, Size: req.size, RequestID: req.id.String(), HolderKey: req.key, Floor: floor}
	err := c.post(ctx, base+"/v1/segments", body, &reply, "Idempotency-Key", req.id.String())
	if err != nil {
		return segment.Grant{}, err
	}
	if reply.RequestID != req.id.String() || reply.Tag != tag || reply.First < 1 || reply.Last < reply.First {
		return segment.Grant{}, fmt.Errorf("idmint %s answered request %s for %q with request %s for %q, range [%d, %d]",
			base, req.id, tag, reply.RequestID, reply.Tag, reply.First, reply.Last)
	}
	return segment.Grant{
		Range:     segment.Range{First: reply.First, Last: reply.Last},
		MinStep:   reply.Step,
		MaxStep:   reply.MaxStep,
		RequestID: reply.RequestID,
		Recovered: reply.Recovered,
	}, nil
}

type giveBackBody struct {
	Tag       string `json:"biz_tag"`
	RequestID string `json:"request_id"`
	HolderKey string `json:"holder_key"`
	First     int64  `json:"first,string"`
	Last      int64  `json:"last,string"`
}

type giveBackReply struct {
	GivenBack bool `json:"given_back"`
}

// giveBack returns r, the unused tail of req's range, with req's holder
// key. It moves on to the next instance only when the request certainly did
// not reach the last one (no connection, or an instance shutting down): a
// give-back that may have been applied is never sent twice.
func (c *Client) giveBack(ctx context.Context, tag string, req rangeRequest, r segment.Range) (bool, error) {
	body := giveBackBody{Tag: tag, RequestID: req.id.String(), HolderKey: req.key, First: r.First, Last: r.Last}
	n := len(c.urls)
	start := int(c.preferred.Load())
	var errs []error
	for i := range n {
		var reply giveBackReply
		err := c.post(ctx, c.urls[(start+i)%n]+"/v1/segments/giveback", body, &reply)
		if err == nil {
			return reply.GivenBack, nil
		}
		errs = append(errs, err)
		var opErr *net.OpError
		var refused *APIError
		notSent := (errors.As(err, &opErr) && opErr.Op == "dial") ||
			(errors.As(err, &refused) && refused.Code == "shutting_down")
		if !notSent || ctx.Err() != nil {
			break
		}
	}
	return false, errors.Join(errs...)
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
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			e.Error.Code, e.Error.Message = "http_error", http.StatusText(resp.StatusCode)
		}
		return &APIError{URL: url, Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode reply of %s: %w", url, err)
	}
	return nil
}
