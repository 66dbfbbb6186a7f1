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
// every error a handler can meet, its status, code, Retry-After, public
// message and whether it counts as a refusal; Server.WriteError writes it.
// docs/errors.md and the code enum of openapi.yaml are checked against the
// table by the tests.

// Error codes: the wire package's, named here too for the table and for
// programs that match on httpapi's names.
const (
	CodeBadRequest            = wire.CodeBadRequest
	CodeInvalidTag            = wire.CodeInvalidTag
	CodeInvalidCount          = wire.CodeInvalidCount
	CodeInvalidFormat         = wire.CodeInvalidFormat
	CodeInvalidSize           = wire.CodeInvalidSize
	CodeInvalidRequestID      = wire.CodeInvalidRequestID
	CodeInvalidRange          = wire.CodeInvalidRange
	CodeInvalidHolderKey      = wire.CodeInvalidHolderKey
	CodeInvalidFloor          = wire.CodeInvalidFloor
	CodeInvalidID             = wire.CodeInvalidID
	CodeInvalidJSON           = wire.CodeInvalidJSON
	CodeInvalidSpec           = wire.CodeInvalidSpec
	CodeUnauthorized          = wire.CodeUnauthorized
	CodeForbidden             = wire.CodeForbidden
	CodeUnknownTag            = wire.CodeUnknownTag
	CodeUnknownToken          = wire.CodeUnknownToken
	CodeNotFound              = wire.CodeNotFound
	CodeMethod                = wire.CodeMethod
	CodeRequestConflict       = wire.CodeRequestConflict
	CodeNotHolder             = wire.CodeNotHolder
	CodeGivenBack             = wire.CodeGivenBack
	CodeTagExists             = wire.CodeTagExists
	CodeNotRaised             = wire.CodeNotRaised
	CodeBodyTooLarge          = wire.CodeBodyTooLarge
	CodeQueryTooLong          = wire.CodeQueryTooLong
	CodeRateLimited           = wire.CodeRateLimited
	CodeInternal              = wire.CodeInternal
	CodeUnavailable           = wire.CodeUnavailable
	CodeRolledBack            = wire.CodeRolledBack
	CodeExhausted             = wire.CodeExhausted
	CodeShuttingDown          = wire.CodeShuttingDown
	CodeSnowflakeNoWorker     = wire.CodeSnowflakeNoWorker
	CodeSnowflakeLeaseExpired = wire.CodeSnowflakeLeaseExpired
	CodeSnowflakeClockSkew    = wire.CodeSnowflakeClockSkew
	CodeSnowflakeBackwards    = wire.CodeSnowflakeBackwards
	CodeSnowflakeExhausted    = wire.CodeSnowflakeExhausted
)

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
	err    error
	status int
	code   string
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

// errorTable maps every error to its reply. Sentinel rows are tried in
// order (the first whose err matches wins); an error that matches none is
// a 500 "internal error" with the details only in the log.
var errorTable = []errorRule{
	// httpapi's own errors: bad input, access control, limits, routing.
	{code: CodeInvalidTag, status: http.StatusBadRequest, when: "missing, repeated or malformed `biz_tag` (1-64 of `A-Za-z0-9_.:-`, starting with a letter or digit)"},
	{code: CodeInvalidCount, status: http.StatusBadRequest, when: "`count` missing or outside 1…max"},
	{code: CodeInvalidFormat, status: http.StatusBadRequest, when: "`format` other than `list` or `ranges`, or repeated"},
	{code: CodeBadRequest, status: http.StatusBadRequest, when: "a `/v1/segments` body that is not one JSON object of the documented fields; a bad standby name"},
	{code: CodeInvalidRequestID, status: http.StatusBadRequest, when: "`request_id` missing, not a UUID in its 36-character form, or the nil UUID"},
	{code: CodeInvalidSize, status: http.StatusBadRequest, when: "`size` outside 0…100,000,000"},
	{code: CodeInvalidRange, status: http.StatusBadRequest, when: "a give-back whose `first`/`last` (decimal strings) are not 1 ≤ first ≤ last"},
	{code: CodeInvalidHolderKey, status: http.StatusBadRequest, when: "a `/v1/segments` request without a `holder_key` of 22-128 characters of `A-Za-z0-9_-`"},
	{code: CodeInvalidFloor, status: http.StatusBadRequest, when: "a negative `floor`"},
	{code: CodeInvalidID, status: http.StatusBadRequest, when: "`/snowflake/parse` without exactly one `id`"},
	{code: CodeInvalidJSON, status: http.StatusBadRequest, when: "admin API: a body that is not the JSON asked for (the message names the field and what it wants)"},
	{code: CodeUnauthorized, status: http.StatusUnauthorized, refusal: true, when: "missing, malformed, invalid or revoked bearer token; `WWW-Authenticate: Bearer realm=\"idmint\"`"},
	{code: CodeForbidden, status: http.StatusForbidden, refusal: true, when: "the token's scopes do not cover the route or the `biz_tag`"},
	{code: CodeNotFound, status: http.StatusNotFound, when: "no such endpoint (the message points at `/id/dashboard`, `/id/health` and `/openapi.yaml`); no such standby"},
	{code: CodeMethod, status: http.StatusMethodNotAllowed, when: "a method the route does not take (GET routes; POST for `/v1/segments`)"},
	{code: CodeRateLimited, status: http.StatusTooManyRequests, retry: retryFromError, refusal: true, when: "the token (or address) took its IDs per second, or made its range requests per second, or a `floor` above the tag's `max_id` found its budget for raising it spent (nothing granted); an address made its login attempts per minute (the login form again, as HTML)"},
	{code: CodeQueryTooLong, status: http.StatusRequestURITooLong, refusal: true, when: "query string over 2048 bytes (a header over 16 KiB is refused by Go's server itself, 431, plain text)"},
	{code: CodeBodyTooLarge, status: http.StatusRequestEntityTooLarge, refusal: true, when: "request body over 64 KiB"},
	{code: CodeUnavailable, status: http.StatusServiceUnavailable, retry: retryFixed, when: "tokens cannot be checked: the token store cannot be reached"},
	{code: CodeInternal, status: http.StatusInternalServerError, message: "internal error", when: "a bug or a panic; the details are in the log, never in the reply"},

	// Sentinel errors of the packages below, in the order they are tried.
	{err: allocator.ErrNotHolder, code: CodeNotHolder, status: http.StatusConflict,
		message: "request_id belongs to another caller: a retry or a give-back must come from the principal that made the request, with its holder_key; nothing changed",
		when:    "the `request_id` belongs to another caller (another principal or holder key) or to an instance: nothing granted or given back"},
	{err: allocator.ErrGivenBack, code: CodeGivenBack, status: http.StatusConflict,
		message: "the whole range of request_id was given back: it keeps no ids; ask with a new request_id",
		when:    "a retried grant whose whole range was given back"},
	{err: allocator.ErrFloorBudget, code: CodeRateLimited, status: http.StatusTooManyRequests, retry: retryFixed, refusal: true,
		message: floorRefusedMessage,
		when:    "a `floor` above the tag's `max_id` while the caller's budget for raising it is spent; nothing granted (POST /v1/segments answers it with the wait in Retry-After)"},
	{err: allocator.ErrRequestConflict, code: CodeRequestConflict, status: http.StatusConflict, when: "the `request_id` was granted for another tag"},
	{err: allocator.ErrExists, code: CodeTagExists, status: http.StatusConflict, when: "admin API: the tag exists"},
	{err: allocator.ErrNotRaised, code: CodeNotRaised, status: http.StatusConflict, when: "admin API: a bump that would not raise `max_id`; nothing changed"},
	{err: allocator.ErrInvalidSpec, code: CodeInvalidSpec, status: http.StatusBadRequest, when: "admin API: tag settings out of bounds"},
	{err: token.ErrInvalid, code: CodeInvalidSpec, status: http.StatusBadRequest, when: "admin API: token settings out of bounds (name of 1-100 bytes, at least one valid scope, `ids_per_second` 0 or up to 10^12); nothing stored"},
	{err: token.ErrUnknown, code: CodeUnknownToken, status: http.StatusNotFound, when: "admin API: no token has this ID"},
	{err: snowflake.ErrInvalidID, code: CodeInvalidID, status: http.StatusBadRequest, when: "`/snowflake/parse`: an `id` that is not a snowflake of this layout"},
	{err: snowflake.ErrNoWorker, code: CodeSnowflakeNoWorker, status: http.StatusServiceUnavailable, retry: retryFixed,
		message: "no snowflake ids from this instance: it holds no worker id (every worker id is leased by another instance, or the database cannot be reached); it keeps trying. Segment ids (/id) are not affected",
		when:    "this instance holds no worker ID"},
	{err: snowflake.ErrLeaseExpired, code: CodeSnowflakeLeaseExpired, status: http.StatusServiceUnavailable, retry: retryFixed,
		message: "no snowflake ids from this instance: its worker id lease could not be renewed in time; retry later or elsewhere",
		when:    "the worker ID's lease could not be renewed in time"},
	{err: snowflake.ErrClockSkew, code: CodeSnowflakeClockSkew, status: http.StatusServiceUnavailable, retry: retryFixed,
		message: "no snowflake ids from this instance: its clock differs from the database's by more than the margin",
		when:    "the clock differs from the database's by more than the margin"},
	{err: snowflake.ErrClockBackwards, code: CodeSnowflakeBackwards, status: http.StatusServiceUnavailable, retry: retryFixed,
		message: "no snowflake ids from this instance: its clock is behind the last timestamp used by more than the longest wait",
		when:    "the clock went back by more than the longest wait"},
	{err: snowflake.ErrTimeExhausted, code: CodeSnowflakeExhausted, status: http.StatusServiceUnavailable,
		message: "the snowflake layout's time bits are used up (or its epoch is ahead of the clock)",
		when:    "the layout's time bits are used up"},
	{err: snowflake.ErrClosed, code: CodeShuttingDown, status: http.StatusServiceUnavailable, retry: retryFixed,
		message: "idmint is shutting down", when: "the instance is stopping (snowflake node closed)"},
	{err: allocator.ErrInvalidTag, code: CodeInvalidTag, status: http.StatusBadRequest, when: "a malformed `biz_tag` found by the allocator"},
	{err: allocator.ErrUnknownTag, code: CodeUnknownTag, status: http.StatusNotFound, when: "no such tag (tags are never created by a request)"},
	{err: allocator.ErrExhausted, code: CodeExhausted, status: http.StatusServiceUnavailable,
		message: "biz_tag exhausted: no ids left below 2^63-1",
		when:    "the tag reached 2^63-1: no segment of its step fits below it (the IDs left are handed out first, `/ids` giving fewer than `count`)"},
	{err: allocator.ErrClosed, code: CodeShuttingDown, status: http.StatusServiceUnavailable, retry: retryFixed,
		message: "idmint is shutting down", when: "the instance is stopping"},
	{err: allocator.ErrRolledBack, code: CodeRolledBack, status: http.StatusServiceUnavailable, retry: retryFromError,
		message: "the database granted ids at or below ids already handed out (restored backup or lagging replica?); refusing to serve them until an operator bumps the tag",
		when:    "a range below what this instance already served reached it and was refused (see the README's \"After a database restore\")"},
	{err: allocator.ErrUnavailable, code: CodeUnavailable, status: http.StatusServiceUnavailable, retry: retryFromError,
		message: "no ids available right now: the segment store cannot be reached; retry later",
		when:    "no ID in memory and the database cannot be reached"},
	{err: context.DeadlineExceeded, code: CodeUnavailable, status: http.StatusServiceUnavailable, retry: retryFromError,
		message: "no ids available right now: the segment store cannot be reached; retry later",
		when:    "the request's time ran out waiting for the database"},
}

// ownRules indexes the rows of httpapi's own errors by code; internalRule
// is the row of everything the table does not know.
var ownRules, internalRule = func() (map[string]*errorRule, *errorRule) {
	m := map[string]*errorRule{}
	for i := range errorTable {
		if errorTable[i].err == nil {
			m[errorTable[i].code] = &errorTable[i]
		}
	}
	return m, m[CodeInternal]
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
