package core

import (
	"context"
	"errors"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/redact"
	"github.com/idmint/idmint/region"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// This file is the one vocabulary of errors: Rules says, for every error an
// operation can meet, its stable code (the one it was born with:
// wire.CodeOf), its Retry-After, its public message and whether it counts
// as a refusal. Each transport maps the code once at its edge: httpapi to
// an HTTP status (httpStatus), rpcapi to a gRPC code (grpcCodes).
// docs/errors.md and the code enum of openapi.yaml are checked against
// the rows by httpapi's tests.

// DefaultRetryAfter is the wait of a RetryFixed row, and of a
// RetryFromError row whose error carries none.
const DefaultRetryAfter = time.Second

// maxLogged bounds what a call puts in a log line or an error.
const maxLogged = 256

// Retry says what wait a row asks the caller for.
type Retry uint8

const (
	// RetryNone asks for none.
	RetryNone Retry = iota
	// RetryFixed is DefaultRetryAfter.
	RetryFixed
	// RetryFromError is the wait the error carries (a rate limit's, a
	// segment.UnavailableError's), else DefaultRetryAfter.
	RetryFromError
)

// Rule is one row of Rules.
type Rule struct {
	// Err is the sentinel the row matches with errors.Is. A row without
	// one is the row of an *Error of that code.
	Err  error
	Code string
	// Retry says whether a wait goes with the reply.
	Retry Retry
	// Message is the public message; "" sends the error's own text,
	// redacted.
	Message string
	// Refusal counts the reply in idmint_http_refused_total: the call was
	// turned away by access control or a limit.
	Refusal bool
	// When says in a few words when the row applies, for docs/errors.md.
	When string
}

// Rules is every error's row: its code, Retry-After, public message and
// whether it is a refusal. Sentinel rows are tried in
// order (the first whose err matches wins); an error that matches none is
// a 500 "internal error" with the details only in the log.
var Rules = []Rule{
	// the core's and the adapters' own errors: bad input, access control, limits, routing.
	{Code: wire.CodeInvalidTag, When: "missing, repeated or malformed `biz_tag` (1-64 of `A-Za-z0-9_.:-`, starting with a letter or digit)"},
	{Code: wire.CodeInvalidCount, When: "`count` missing or outside 1…max"},
	{Code: wire.CodeInvalidFormat, When: "`format` other than `list` or `ranges`, or repeated"},
	{Code: wire.CodeBadRequest, When: "a `/v1/segments` body that is not one JSON object of the documented fields; a bad standby name"},
	{Code: wire.CodeInvalidRequestID, When: "`request_id` missing, not a UUID in its 36-character form, or the nil UUID"},
	{Code: wire.CodeInvalidSize, When: "`size` outside 0…100,000,000"},
	{Code: wire.CodeInvalidRange, When: "a give-back whose `first`/`last` (decimal strings) are not 1 ≤ first ≤ last"},
	{Code: wire.CodeInvalidHolderKey, When: "a `/v1/segments` request without a `holder_key` of 22-128 characters of `A-Za-z0-9_-`"},
	{Code: wire.CodeInvalidFloor, When: "a negative `floor`"},
	{Code: wire.CodeInvalidID, When: "`/snowflake/parse` without exactly one `id`"},
	{Code: wire.CodeInvalidJSON, When: "admin API: a body that is not the JSON asked for (the message names the field and what it wants)"},
	{Code: wire.CodeUnauthorized, Refusal: true, When: "missing, malformed, invalid or revoked bearer token; `WWW-Authenticate: Bearer realm=\"idmint\"`"},
	{Code: wire.CodeForbidden, Refusal: true, When: "the token's scopes do not cover the route or the `biz_tag`"},
	{Code: wire.CodeNotFound, When: "no such endpoint (the message points at `/id/dashboard`, `/id/health` and `/openapi.yaml`); no such standby"},
	{Code: wire.CodeMethod, When: "a method the route does not take (GET routes; POST for `/v1/segments`)"},
	{Code: wire.CodeRateLimited, Retry: RetryFromError, Refusal: true, When: "the token (or address) took its IDs per second, or made its range requests per second, or a `floor` above the tag's `max_id` found its budget for raising it spent (nothing granted); an address made its login attempts per minute (the login form again, as HTML)"},
	{Code: wire.CodeQueryTooLong, Refusal: true, When: "query string over 2048 bytes (a header over 16 KiB is refused by Go's server itself, 431, plain text)"},
	{Code: wire.CodeBodyTooLarge, Refusal: true, When: "request body over 64 KiB"},
	{Code: wire.CodeUnavailable, Retry: RetryFixed, When: "tokens cannot be checked: the token store cannot be reached"},
	{Code: wire.CodeInternal, Message: "internal error", When: "a bug or a panic; the details are in the log, never in the reply"},

	// Sentinel errors of the packages below, in the order they are tried.
	{Err: allocator.ErrNotHolder, Code: wire.CodeNotHolder,
		Message: "request_id belongs to another caller: a retry or a give-back must come from the principal that made the request, with its holder_key; nothing changed",
		When:    "the `request_id` belongs to another caller (another principal or holder key) or to an instance: nothing granted or given back"},
	{Err: allocator.ErrGivenBack, Code: wire.CodeGivenBack,
		Message: "the whole range of request_id was given back: it keeps no ids; ask with a new request_id",
		When:    "a retried grant whose whole range was given back"},
	{Err: allocator.ErrFloorBudget, Code: wire.CodeRateLimited, Retry: RetryFixed, Refusal: true,
		Message: floorRefusedMessage,
		When:    "a `floor` above the tag's `max_id` while the caller's budget for raising it is spent; nothing granted (POST /v1/segments answers it with the wait in Retry-After)"},
	{Err: allocator.ErrRequestConflict, Code: wire.CodeRequestConflict, When: "the `request_id` was granted for another tag"},
	{Err: allocator.ErrExists, Code: wire.CodeTagExists, When: "admin API: the tag exists"},
	{Err: allocator.ErrNotRaised, Code: wire.CodeNotRaised, When: "admin API: a bump that would not raise `max_id`; nothing changed"},
	{Err: allocator.ErrInvalidSpec, Code: wire.CodeInvalidSpec, When: "admin API: tag settings out of bounds"},
	{Err: token.ErrInvalid, Code: wire.CodeInvalidSpec, When: "admin API: token settings out of bounds (name of 1-100 bytes, at least one valid scope, `ids_per_second` 0 or up to 10^12); nothing stored"},
	{Err: token.ErrUnknown, Code: wire.CodeUnknownToken, When: "admin API: no token has this ID"},
	{Err: snowflake.ErrInvalidID, Code: wire.CodeInvalidID, When: "`/snowflake/parse`: an `id` that is not a snowflake of this layout"},
	{Err: snowflake.ErrNoWorker, Code: wire.CodeSnowflakeNoWorker, Retry: RetryFixed,
		Message: "no snowflake ids from this instance: it holds no worker id (every worker id is leased by another instance, or the database cannot be reached); it keeps trying. Segment ids (/id) are not affected",
		When:    "this instance holds no worker ID"},
	{Err: snowflake.ErrLeaseExpired, Code: wire.CodeSnowflakeLeaseExpired, Retry: RetryFixed,
		Message: "no snowflake ids from this instance: its worker id lease could not be renewed in time; retry later or elsewhere",
		When:    "the worker ID's lease could not be renewed in time"},
	{Err: snowflake.ErrClockSkew, Code: wire.CodeSnowflakeClockSkew, Retry: RetryFixed,
		Message: "no snowflake ids from this instance: its clock differs from the database's by more than the margin",
		When:    "the clock differs from the database's by more than the margin"},
	{Err: snowflake.ErrClockBackwards, Code: wire.CodeSnowflakeBackwards, Retry: RetryFixed,
		Message: "no snowflake ids from this instance: its clock is behind the last timestamp used by more than the longest wait",
		When:    "the clock went back by more than the longest wait"},
	{Err: snowflake.ErrTimeExhausted, Code: wire.CodeSnowflakeExhausted,
		Message: "the snowflake layout's time bits are used up (or its epoch is ahead of the clock)",
		When:    "the layout's time bits are used up"},
	{Err: allocator.ErrInvalidTag, Code: wire.CodeInvalidTag, When: "a malformed `biz_tag` found by the allocator"},
	{Err: allocator.ErrUnknownTag, Code: wire.CodeUnknownTag, When: "no such tag (tags are never created by a request)"},
	{Err: allocator.ErrExhausted, Code: wire.CodeExhausted,
		Message: "biz_tag exhausted: no ids left below 2^63-1",
		When:    "the tag reached 2^63-1: no segment of its step fits below it (the IDs left are handed out first, `/ids` giving fewer than `count`)"},
	{Err: allocator.ErrShareExhausted, Code: wire.CodeShareExhausted, Retry: RetryFixed,
		Message: "this region's share of the id space holds no ids above the tag's max_id (its database was fenced by a region split); ask another region",
		When:    "regions: the database's share ends below the tag's next ID (a split fenced it and wrote no epoch above yet, or the region was retired); a gap, never a duplicate"},
	{Err: region.ErrConflict, Code: wire.CodeRegionConflict, Retry: RetryFixed,
		Message: "this region's share may overlap a peer region's (or the instance's --region is not its database's): not granting; see docs/regions.md",
		When:    "regions: a peer region's share overlaps this one's, or disagrees with its epochs; nothing granted until it is resolved"},
	{Err: allocator.ErrClosed, Code: wire.CodeShuttingDown, Retry: RetryFixed,
		Message: "idmint is shutting down", When: "the instance is stopping (its allocator or Snowflake node closed)"},
	{Err: allocator.ErrRolledBack, Code: wire.CodeRolledBack, Retry: RetryFromError,
		Message: "the database granted ids at or below ids already handed out (restored backup or lagging replica?); refusing to serve them until an operator bumps the tag",
		When:    "a range below what this instance already served reached it and was refused (see the README's \"After a database restore\")"},
	{Err: allocator.ErrUnavailable, Code: wire.CodeUnavailable, Retry: RetryFromError,
		Message: "no ids available right now: the segment store cannot be reached; retry later",
		When:    "no ID in memory and the database cannot be reached"},
	{Err: context.DeadlineExceeded, Code: wire.CodeUnavailable, Retry: RetryFromError,
		Message: "no ids available right now: the segment store cannot be reached; retry later",
		When:    "the request's time ran out waiting for the database"},
}

// ownRules indexes the rows of the *Error codes; internalRule is the row
// of everything the table does not know.
var ownRules, internalRule = func() (map[string]*Rule, *Rule) {
	m := map[string]*Rule{}
	for i := range Rules {
		if Rules[i].Err == nil {
			m[Rules[i].Code] = &Rules[i]
		}
	}
	return m, m[wire.CodeInternal]
}()

// Error is an error the core or an adapter makes itself, of a code of
// Rules: bad input, access control, limits, routing.
type Error struct {
	Code    string
	Message string
	// RetryAfter is the wait of a RetryFromError row (a rate limit's).
	RetryAfter time.Duration
	// Challenge is the RFC 6750 challenge of an unauthorized call (the
	// WWW-Authenticate header over HTTP).
	Challenge string
	// counted: the refusal was counted where it was born (Config.OnRefused).
	counted bool
}

func (e *Error) Error() string { return e.Message }

// NewError returns the error of code with message.
func NewError(code, message string) *Error { return &Error{Code: code, Message: message} }

// Counted reports whether err is a refusal already counted where it was
// born (by the core, through Config.OnRefused), so that an edge counts the
// others only.
func Counted(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.counted
}

// Lookup returns err's row: its own row for an *Error, else the first
// sentinel row that matches, else the first row of the code it carries
// (wire.CodeOf), else the internal row.
func Lookup(err error) *Rule {
	if ae, ok := errors.AsType[*Error](err); ok {
		if rule := ownRules[ae.Code]; rule != nil {
			return rule
		}
		return internalRule
	}
	if we, ok := errors.AsType[*wire.Error](err); ok && we.Status != 0 {
		// Another idmint's answer (wire.DecodeError): its code's own row
		// first, since it matches every sentinel of its code.
		if rule := ownRules[we.Code]; rule != nil {
			return rule
		}
	}
	for i := range Rules {
		if rule := &Rules[i]; rule.Err != nil && errors.Is(err, rule.Err) {
			return rule
		}
	}
	// An error of a code that is no sentinel of a row: the first row of
	// its code (an error another idmint answered, as wire.DecodeError
	// read it).
	if code := wire.CodeOf(err); code != "" {
		for i := range Rules {
			if Rules[i].Code == code {
				return &Rules[i]
			}
		}
	}
	return internalRule
}

// Wait is the wait the row asks for err (0: none): DefaultRetryAfter for
// RetryFixed; for RetryFromError a rate limit's wait or a segment store's
// (segment.UnavailableError), else DefaultRetryAfter.
func (r *Rule) Wait(err error) time.Duration {
	switch r.Retry {
	case RetryFixed:
		return DefaultRetryAfter
	case RetryFromError:
		if ae, ok := errors.AsType[*Error](err); ok && ae.RetryAfter > 0 {
			return ae.RetryAfter
		}
		if we, ok := errors.AsType[*wire.Error](err); ok && we.RetryAfter > 0 {
			return we.RetryAfter
		}
		if ue, ok := errors.AsType[*segment.UnavailableError](err); ok && ue.RetryAfter > 0 {
			return ue.RetryAfter
		}
		return DefaultRetryAfter
	}
	return 0
}

// Public is the message a caller gets for err: the row's, or the error's
// own text redacted. It never holds a stack trace or SQL.
func (r *Rule) Public(err error) string {
	if r.Message != "" {
		return r.Message
	}
	return redact.Error(err)
}

// temporary reports whether err says "not now" (the store or the
// instance cannot serve at the moment), rather than "never".
func temporary(err error) bool {
	switch Lookup(err).Code {
	case wire.CodeUnavailable, wire.CodeShuttingDown, wire.CodeExhausted, wire.CodeShareExhausted, wire.CodeRegionConflict, wire.CodeRolledBack:
		return true
	}
	return false
}

// truncate shortens s to at most n bytes for errors and logs, marking the
// cut: a call can never make a reply or a log line large.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…(truncated)"
}

// Truncate is truncate, for the adapters' messages and logs.
func Truncate(s string, n int) string { return truncate(s, n) }
