package httpapi

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/internal/faillog"
	"github.com/idmint/idmint/internal/redact"
	"github.com/idmint/idmint/wire"
)

// This file is the one place where errors become HTTP: core.Rules says, for
// every error, its code (the one it was born with), Retry-After, public
// message and whether it counts as a refusal; httpStatus is the status of
// each code; Server.WriteError writes it. rpcapi maps the same codes to
// gRPC codes in its own one table. docs/errors.md and the code enum of
// openapi.yaml are checked against both by the tests.

// maxLogged bounds what a request puts in a log line or an error.
const maxLogged = 256

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
	wire.CodeShareExhausted:        http.StatusServiceUnavailable,
	wire.CodeRegionConflict:        http.StatusServiceUnavailable,
	wire.CodeRolledBack:            http.StatusServiceUnavailable,
}

// statusOf is the HTTP status of a row.
func statusOf(rule *core.Rule) int { return httpStatus[rule.Code] }

// newError is one of httpapi's own errors (a row of core.Rules without a
// sentinel): bad input, limits, routing.
func newError(code, message string) *core.Error { return core.NewError(code, message) }

// WriteError writes err as idmint's JSON error, as its row of core.Rules
// and its code's status say: the one way handlers answer with an error
// (routes a program adds beside idmint's use it too, e.g. for AuthorizeTag's
// refusals). A refusal is counted in idmint_http_refused_total, unless the
// core counted it where it made it; a 5xx is logged with the error,
// redacted (at most one line a second per code: faillog). The
// reply's message is redacted too, and never holds a stack trace or SQL.
func (s *Server) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	rule, status := s.noteError(w, r, err)
	var body wire.ErrorBody
	body.Error.Code = rule.Code
	body.Error.Message = rule.Public(err)
	writeJSON(w, status, body)
}

// noteError does for err what every error reply does whatever its body:
// it counts a refusal not counted where it was born, logs a 5xx, and sets
// the WWW-Authenticate and Retry-After headers err's row asks for. It
// returns the row and the HTTP status of err.
func (s *Server) noteError(w http.ResponseWriter, r *http.Request, err error) (*core.Rule, int) {
	rule := core.Lookup(err)
	status := statusOf(rule)
	if rule.Refusal && !core.Counted(err) {
		s.cfg.Metrics.refusedCounter().WithLabelValues(rule.Code).Inc()
	}
	if status >= 500 {
		s.cfg.Logger.Warn(faillog.Message, "path", truncate(r.URL.Path, maxLogged), "query", truncate(r.URL.RawQuery, maxLogged),
			"status", status, "code", rule.Code, "err", redact.Error(err), "request_id", middleware.GetReqID(r.Context()))
	}
	if ae, ok := errors.AsType[*core.Error](err); ok && ae.Challenge != "" {
		w.Header().Set("WWW-Authenticate", ae.Challenge)
	}
	setRetryAfter(w, rule, err)
	return rule, status
}

// setRetryAfter sets the Retry-After header that err's row asks for, if
// any.
func setRetryAfter(w http.ResponseWriter, rule *core.Rule, err error) {
	if wait := rule.Wait(err); wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(core.RetrySeconds(wait)))
	}
}

// truncate shortens s to at most n bytes for errors and logs, marking the
// cut.
func truncate(s string, n int) string { return core.Truncate(s, n) }
