package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/redact"
	"github.com/idmint/idmint/segment"
)

// Error codes: stable, machine-readable, part of the API.
const (
	CodeBadRequest    = "bad_request"
	CodeInvalidTag    = "invalid_biz_tag"
	CodeInvalidCount  = "invalid_count"
	CodeInvalidFormat = "invalid_format"
	CodeUnknownTag    = "unknown_tag"
	CodeUnavailable   = "unavailable"
	CodeRolledBack    = "rolled_back"
	CodeExhausted     = "tag_exhausted"
	CodeShuttingDown  = "shutting_down"
	CodeNotFound      = "not_found"
	CodeMethod        = "method_not_allowed"
	CodeInternal      = "internal"
	defaultRetryAfter = time.Second
	// maxLogged bounds what a request puts in a log line or an error.
	maxLogged = 256
)

// apiError is an error with its HTTP status and code.
type apiError struct {
	status     int
	code       string
	message    string
	retryAfter time.Duration
	// challenge is the WWW-Authenticate header of a 401.
	challenge string
}

func (e *apiError) Error() string { return e.message }

func badRequest(code, message string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, message: message}
}

// toAPIError maps every error a handler can meet to its status: the one
// place where errors become HTTP. Messages never carry SQL or stack traces.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	if ae, ok := snowflakeAPIError(err); ok {
		return ae
	}
	switch {
	case errors.Is(err, allocator.ErrInvalidTag):
		return badRequest(CodeInvalidTag, err.Error())
	case errors.Is(err, allocator.ErrUnknownTag):
		return &apiError{status: http.StatusNotFound, code: CodeUnknownTag, message: err.Error()}
	case errors.Is(err, allocator.ErrExhausted):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeExhausted, message: "biz_tag exhausted: no ids left below 2^63-1"}
	case errors.Is(err, allocator.ErrClosed):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeShuttingDown, message: "idmint is shutting down", retryAfter: defaultRetryAfter}
	case errors.Is(err, allocator.ErrRolledBack):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeRolledBack,
			message:    "the database granted ids at or below ids already handed out (restored backup or lagging replica?); refusing to serve them until an operator bumps the tag",
			retryAfter: retryAfter(err)}
	case errors.Is(err, allocator.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable,
			message: "no ids available right now: the segment store cannot be reached; retry later", retryAfter: retryAfter(err)}
	}
	return &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "internal error"}
}

func retryAfter(err error) time.Duration {
	var ue *segment.UnavailableError
	if errors.As(err, &ue) && ue.RetryAfter > 0 {
		return ue.RetryAfter
	}
	return defaultRetryAfter
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// writeError writes err as JSON. Server-side failures are logged with the
// error, redacted (at most one line a second per code through the
// server's logger: see failureLog); the client gets the mapped message.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	ae := toAPIError(err)
	if ae.status >= 500 {
		log.Warn(requestFailed, "path", truncate(r.URL.Path, maxLogged), "query", truncate(r.URL.RawQuery, maxLogged),
			"status", ae.status, "code", ae.code, "err", redact.Error(err), "request_id", middleware.GetReqID(r.Context()))
	}
	if ae.challenge != "" {
		w.Header().Set("WWW-Authenticate", ae.challenge)
	}
	if ae.retryAfter > 0 {
		secs := int(math.Ceil(ae.retryAfter.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	}
	var body errorBody
	body.Error.Code, body.Error.Message = ae.code, redact.String(ae.message)
	writeJSON(w, ae.status, body)
}
