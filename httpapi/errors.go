package httpapi

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/redact"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// This file is the one place where errors become HTTP: errorTable says, for
// every error a handler can meet, its code (the one it was born with:
// wire.CodeOf), Retry-After, public message and whether it counts as a
// refusal; httpStatus is the status of each code; Server.WriteError writes
// it. rpcapi maps the same codes to gRPC codes in its own one table.
// docs/errors.md and the code enum of openapi.yaml are checked against the
// table by the tests.

const (
	defaultRetryAfter = time.Second
	// maxLogged bounds what a request puts in a log line or an error.
	maxLogged = 256
)

// retryRule says what Retry-After a row sends.
type retryRule uint8

const (
	retryNone retryRule = iota
	// retryFixed is defaultRetryAfter.
	retryFixed
	// retryFromError is the wait the error carries (a rate limit's, a
	// segment.UnavailableError's), else defaultRetryAfter.
	retryFromError
)

// errorRule is one row of errorTable.
type errorRule struct {
	// err is the sentinel the row matches with errors.Is. A row without
	// one is httpapi's own error of that code, built with requestError.
	err  error
	code string
	// status is httpStatus's for code, filled in once (ownRules).
	status int
	retry  retryRule
	// message is the public message; "" sends the error's own text,
	// redacted.
	message string
	// refusal counts the reply in idmint_http_refused_total: the request
	// was turned away by access control or a limit.
	refusal bool
	// when says in a few words when the row applies, for docs/errors.md.
	when string
}

// httpStatus is the one table from an error code to its HTTP status:
// every row of errorTable answers the status of its code.
var httpStatus = map[string]int{
	wire.CodeInvalidTag:            http.StatusBadRequest,
	wire.CodeInvalidCount:          http.StatusBadRequest,
	wire.CodeInvalidFormat:         http.StatusBadRequest,
	wire.CodeBadRequest:            http.StatusBadRequest,
	wire.CodeInvalidRequestID:      http.StatusBadRequest,
	wire.CodeInvalidSize:           http.StatusBadRequest,
	wire.CodeInvalidRange:          http.StatusBadRequest,
	wire.CodeInvalidHolderKey:      http.StatusBadRequest,
	wire.CodeInvalidFloor:          http.StatusBadRequest,
	wire.CodeInvalidID:             http.StatusBadRequest,
	wire.CodeInvalidJSON:           http.StatusBadRequest,
	wire.CodeUnauthorized:          http.StatusUnauthorized,
	wire.CodeForbidden:             http.StatusForbidden,
	wire.CodeNotFound:              http.StatusNotFound,
	wire.CodeMethod:                http.StatusMethodNotAllowed,
	wire.CodeRateLimited:           http.StatusTooManyRequests,
	wire.CodeQueryTooLong:          http.StatusRequestURITooLong,
	wire.CodeBodyTooLarge:          http.StatusRequestEntityTooLarge,
	wire.CodeUnavailable:           http.StatusServiceUnavailable,
	wire.CodeInternal:              http.StatusInternalServerError,
	wire.CodeNotHolder:             http.StatusConflict,
	wire.CodeGivenBack:             http.StatusConflict,
	wire.CodeRequestConflict:       http.StatusConflict,
	wire.CodeTagExists:             http.StatusConflict,
	wire.CodeNotRaised:             http.StatusConflict,
	wire.CodeInvalidSpec:           http.StatusBadRequest,
	wire.CodeUnknownToken:          http.StatusNotFound,
	wire.CodeSnowflakeNoWorker:     http.StatusServiceUnavailable,
	wire.CodeSnowflakeLeaseExpired: http.StatusServiceUnavailable,
	wire.CodeSnowflakeClockSkew:    http.StatusServiceUnavailable,
	wire.CodeSnowflakeBackwards:    http.StatusServiceUnavailable,
	wire.CodeSnowflakeExhausted:    http.StatusServiceUnavailable,
	wire.CodeShuttingDown:          http.StatusServiceUnavailable,
	wire.CodeUnknownTag:            http.StatusNotFound,
	wire.CodeExhausted:             http.StatusServiceUnavailable,
	wire.CodeRolledBack:            http.StatusServiceUnavailable,
}

// errorTable maps every error to its reply. Sentinel rows are tried in
// order (the first whose err matches wins); an error that matches none is
// a 500 "internal error" with the details only in the log.
var errorTable = []errorRule{
	// httpapi's own errors: bad input, access control, limits, routing.
	{code: wire.CodeInvalidTag, when: "missing, repeated or malformed `biz_tag` (1-64 of `A-Za-z0-9_.:-`, starting with a letter or digit)"},
	{code: wire.CodeInvalidCount, when: "`count` missing or outside 1…max"},
	{code: wire.CodeInvalidFormat, when: "`format` other than `list` or `ranges`, or repeated"},
	{code: wire.CodeBadRequest, when: "a `/v1/segments` body that is not one JSON object of the documented fields; a bad standby name"},
	{code: wire.CodeInvalidRequestID, when: "`request_id` missing, not a UUID in its 36-character form, or the nil UUID"},
	{code: wire.CodeInvalidSize, when: "`size` outside 0…100,000,000"},
	{code: wire.CodeInvalidRange, when: "a give-back whose `first`/`last` (decimal strings) are not 1 ≤ first ≤ last"},
	{code: wire.CodeInvalidHolderKey, when: "a `/v1/segments` request without a `holder_key` of 22-128 characters of `A-Za-z0-9_-`"},
	{code: wire.CodeInvalidFloor, when: "a negative `floor`"},
	{code: wire.CodeInvalidID, when: "`/snowflake/parse` without exactly one `id`"},
	{code: wire.CodeInvalidJSON, when: "admin API: a body that is not the JSON asked for (the message names the field and what it wants)"},
	{code: wire.CodeUnauthorized, refusal: true, when: "missing, malformed, invalid or revoked bearer token; `WWW-Authenticate: Bearer realm=\"idmint\"`"},
	{code: wire.CodeForbidden, refusal: true, when: "the token's scopes do not cover the route or the `biz_tag`"},
	{code: wire.CodeNotFound, when: "no such endpoint (the message points at `/id/dashboard`, `/id/health` and `/openapi.yaml`); no such standby"},
	{code: wire.CodeMethod, when: "a method the route does not take (GET routes; POST for `/v1/segments`)"},
	{code: wire.CodeRateLimited, retry: retryFromError, refusal: true, when: "the token (or address) took its IDs per second, or made its range requests per second, or a `floor` above the tag's `max_id` found its budget for raising it spent (nothing granted); an address made its login attempts per minute (the login form again, as HTML)"},
	{code: wire.CodeQueryTooLong, refusal: true, when: "query string over 2048 bytes (a header over 16 KiB is refused by Go's server itself, 431, plain text)"},
	{code: wire.CodeBodyTooLarge, refusal: true, when: "request body over 64 KiB"},
	{code: wire.CodeUnavailable, retry: retryFixed, when: "tokens cannot be checked: the token store cannot be reached"},
	{code: wire.CodeInternal, message: "internal error", when: "a bug or a panic; the details are in the log, never in the reply"},

	// Sentinel errors of the packages below, in the order they are tried.
	{err: allocator.ErrNotHolder, code: wire.CodeNotHolder,
		message: "request_id belongs to another caller: a retry or a give-back must come from the principal that made the request, with its holder_key; nothing changed",
		when:    "the `request_id` belongs to another caller (another principal or holder key) or to an instance: nothing granted or given back"},
	{err: allocator.ErrGivenBack, code: wire.CodeGivenBack,
		message: "the whole range of request_id was given back: it keeps no ids; ask with a new request_id",
		when:    "a retried grant whose whole range was given back"},
	{err: allocator.ErrFloorBudget, code: wire.CodeRateLimited, retry: retryFixed, refusal: true,
		message: floorRefusedMessage,
		when:    "a `floor` above the tag's `max_id` while the caller's budget for raising it is spent; nothing granted (POST /v1/segments answers it with the wait in Retry-After)"},
	{err: allocator.ErrRequestConflict, code: wire.CodeRequestConflict, when: "the `request_id` was granted for another tag"},
	{err: allocator.ErrExists, code: wire.CodeTagExists, when: "admin API: the tag exists"},
	{err: allocator.ErrNotRaised, code: wire.CodeNotRaised, when: "admin API: a bump that would not raise `max_id`; nothing changed"},
	{err: allocator.ErrInvalidSpec, code: wire.CodeInvalidSpec, when: "admin API: tag settings out of bounds"},
	{err: token.ErrInvalid, code: wire.CodeInvalidSpec, when: "admin API: token settings out of bounds (name of 1-100 bytes, at least one valid scope, `ids_per_second` 0 or up to 10^12); nothing stored"},
	{err: token.ErrUnknown, code: wire.CodeUnknownToken, when: "admin API: no token has this ID"},
	{err: snowflake.ErrInvalidID, code: wire.CodeInvalidID, when: "`/snowflake/parse`: an `id` that is not a snowflake of this layout"},
	{err: snowflake.ErrNoWorker, code: wire.CodeSnowflakeNoWorker, retry: retryFixed,
		message: "no snowflake ids from this instance: it holds no worker id (every worker id is leased by another instance, or the database cannot be reached); it keeps trying. Segment ids (/id) are not affected",
		when:    "this instance holds no worker ID"},
	{err: snowflake.ErrLeaseExpired, code: wire.CodeSnowflakeLeaseExpired, retry: retryFixed,
		message: "no snowflake ids from this instance: its worker id lease could not be renewed in time; retry later or elsewhere",
		when:    "the worker ID's lease could not be renewed in time"},
	{err: snowflake.ErrClockSkew, code: wire.CodeSnowflakeClockSkew, retry: retryFixed,
		message: "no snowflake ids from this instance: its clock differs from the database's by more than the margin",
		when:    "the clock differs from the database's by more than the margin"},
	{err: snowflake.ErrClockBackwards, code: wire.CodeSnowflakeBackwards, retry: retryFixed,
		message: "no snowflake ids from this instance: its clock is behind the last timestamp used by more than the longest wait",
		when:    "the clock went back by more than the longest wait"},
	{err: snowflake.ErrTimeExhausted, code: wire.CodeSnowflakeExhausted,
		message: "the snowflake layout's time bits are used up (or its epoch is ahead of the clock)",
		when:    "the layout's time bits are used up"},
	{err: snowflake.ErrClosed, code: wire.CodeShuttingDown, retry: retryFixed,
		message: "idmint is shutting down", when: "the instance is stopping (snowflake node closed)"},
	{err: allocator.ErrInvalidTag, code: wire.CodeInvalidTag, when: "a malformed `biz_tag` found by the allocator"},
	{err: allocator.ErrUnknownTag, code: wire.CodeUnknownTag, when: "no such tag (tags are never created by a request)"},
	{err: allocator.ErrExhausted, code: wire.CodeExhausted,
		message: "biz_tag exhausted: no ids left below 2^63-1",
		when:    "the tag reached 2^63-1: no segment of its step fits below it (the IDs left are handed out first, `/ids` giving fewer than `count`)"},
	{err: allocator.ErrClosed, code: wire.CodeShuttingDown, retry: retryFixed,
		message: "idmint is shutting down", when: "the instance is stopping"},
	{err: allocator.ErrRolledBack, code: wire.CodeRolledBack, retry: retryFromError,
		message: "the database granted ids at or below ids already handed out (restored backup or lagging replica?); refusing to serve them until an operator bumps the tag",
		when:    "a range below what this instance already served reached it and was refused (see the README's \"After a database restore\")"},
	{err: allocator.ErrUnavailable, code: wire.CodeUnavailable, retry: retryFromError,
		message: "no ids available right now: the segment store cannot be reached; retry later",
		when:    "no ID in memory and the database cannot be reached"},
	{err: context.DeadlineExceeded, code: wire.CodeUnavailable, retry: retryFromError,
		message: "no ids available right now: the segment store cannot be reached; retry later",
		when:    "the request's time ran out waiting for the database"},
}

// ownRules indexes the rows of httpapi's own errors by code; internalRule
// is the row of everything the table does not know.
var ownRules, internalRule = func() (map[string]*errorRule, *errorRule) {
	m := map[string]*errorRule{}
	for i := range errorTable {
		errorTable[i].status = httpStatus[errorTable[i].code]
		if errorTable[i].err == nil {
			m[errorTable[i].code] = &errorTable[i]
		}
	}
	return m, m[wire.CodeInternal]
}()

// apiError is one of httpapi's own errors: a code of the table and the
// message it sends.
type apiError struct {
	code    string
	message string
	// retryAfter is the wait of a retryFromError row (a rate limit's).
	retryAfter time.Duration
	// challenge is the WWW-Authenticate header of a 401.
	challenge string
}

func (e *apiError) Error() string { return e.message }

// requestError is httpapi's own error of code (a row of errorTable without
// a sentinel), with its message: bad input, access control, limits.
func requestError(code, message string) *apiError {
	return &apiError{code: code, message: message}
}

// lookup returns err's row: its own row for an apiError, else the first
// sentinel row that matches, else internalRule.
func lookup(err error) *errorRule {
	if ae, ok := errors.AsType[*apiError](err); ok {
		if rule := ownRules[ae.code]; rule != nil {
			return rule
		}
		return internalRule
	}
	for i := range errorTable {
		if rule := &errorTable[i]; rule.err != nil && errors.Is(err, rule.err) {
			return rule
		}
	}
	return internalRule
}

// retryAfter is the wait err carries: a rate limit's, or a segment store's
// (segment.UnavailableError); defaultRetryAfter when none.
func retryAfter(err error) time.Duration {
	if ae, ok := errors.AsType[*apiError](err); ok && ae.retryAfter > 0 {
		return ae.retryAfter
	}
	var ue *segment.UnavailableError
	if errors.As(err, &ue) && ue.RetryAfter > 0 {
		return ue.RetryAfter
	}
	return defaultRetryAfter
}

// WriteError writes err as idmint's JSON error, as its row of errorTable
// says: the one way handlers answer with an error (routes a program adds
// beside idmint's use it too, e.g. for AuthorizeTag's refusals). A refusal
// is counted in idmint_http_refused_total; a 5xx is logged with the error,
// redacted (at most one line a second per code: see failureLog). The
// reply's message is redacted too, and never holds a stack trace or SQL.
func (s *Server) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	rule := lookup(err)
	if rule.refusal {
		s.cfg.Metrics.refusedCounter().WithLabelValues(rule.code).Inc()
	}
	if rule.status >= 500 {
		s.cfg.Logger.Warn(requestFailed, "path", truncate(r.URL.Path, maxLogged), "query", truncate(r.URL.RawQuery, maxLogged),
			"status", rule.status, "code", rule.code, "err", redact.Error(err), "request_id", middleware.GetReqID(r.Context()))
	}
	if ae, ok := errors.AsType[*apiError](err); ok && ae.challenge != "" {
		w.Header().Set("WWW-Authenticate", ae.challenge)
	}
	setRetryAfter(w, rule, err)
	var body wire.ErrorBody
	body.Error.Code = rule.code
	if body.Error.Message = rule.message; rule.message == "" {
		body.Error.Message = redact.Error(err)
	}
	writeJSON(w, rule.status, body)
}

// setRetryAfter sets the Retry-After header that err's row asks for, if
// any.
func setRetryAfter(w http.ResponseWriter, rule *errorRule, err error) {
	var wait time.Duration
	switch rule.retry {
	case retryFixed:
		wait = defaultRetryAfter
	case retryFromError:
		wait = retryAfter(err)
	}
	if wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(wait)))
	}
}

// retrySeconds is a wait in the whole seconds of Retry-After, rounded up,
// at least 1.
func retrySeconds(wait time.Duration) int {
	return max(int(math.Ceil(wait.Seconds())), 1)
}
