package wire

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// Error is an idmint error with its stable code: every public error is
// born one (the sentinels below are the very values segment, allocator,
// token and snowflake return), and every error reply decodes into one
// (DecodeError). Transports map the code at their edge: httpapi to an HTTP
// status, rpcapi to a gRPC code, each in one table. The model is
// connect-go's error.go and code.go.
type Error struct {
	// Code is one of the Code constants.
	Code string
	// Message is for people: it may change, never match on it.
	Message string
	// Status is the HTTP status a decoded error came with (0: born here).
	Status int
	// RetryAfter is the wait a decoded error's reply asked for (0: none).
	RetryAfter time.Duration
	// decoded marks an error read off the wire: it stands for every error
	// of its code, so that errors.Is matches it to each sentinel of it.
	decoded bool
	// local marks a sentinel of this process's own state (ErrClosed): no
	// decoded error stands for it, since a server's reply of its code
	// says nothing of it (an instance shutting down has not closed the
	// client that asked it).
	local bool
}

// NewError returns an error of code with message: how a package's
// sentinel is born.
func NewError(code, message string) *Error { return &Error{Code: code, Message: message} }

// NewLocalError returns a sentinel of code that no decoded error matches
// (see Error.local).
func NewLocalError(code, message string) *Error {
	return &Error{Code: code, Message: message, local: true}
}

func (e *Error) Error() string { return e.Message }

// Is reports whether a decoded e stands for target: a sentinel of the same
// code. An error born in this process matches only itself (errors.Is
// compares it by identity), so two sentinels sharing a code stay apart.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && e.decoded && !t.decoded && !t.local && t.Code == e.Code
}

// CodeOf returns the code err carries (the first *Error in its chain), or
// "" when it carries none.
func CodeOf(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return ""
}

// CodeHTTPError is the code DecodeError gives a reply that is not
// idmint's JSON error (a proxy's page, Go's server refusing a header).
const CodeHTTPError = "http_error"

// DecodeError returns the error of a reply with status (>= 300) and body:
// an *Error of the reply's code and message, matching with errors.Is every
// sentinel of that code (segment.ErrUnknownTag for unknown_tag, and so
// on). A body that is not idmint's error gives CodeHTTPError with the
// status's text. retryAfter is the reply's Retry-After header ("" if none).
// The Go client, the CLI's admin client and idmint drill all decode with
// it.
func DecodeError(status int, retryAfter string, body []byte) error {
	e := &Error{Status: status, decoded: true}
	var b ErrorBody
	if json.Unmarshal(body, &b) == nil && b.Error.Code != "" {
		e.Code, e.Message = b.Error.Code, b.Error.Message
	} else {
		e.Code, e.Message = CodeHTTPError, http.StatusText(status)
	}
	if secs, err := strconv.Atoi(retryAfter); err == nil && secs > 0 {
		e.RetryAfter = time.Duration(secs) * time.Second
	}
	return e
}

// The public sentinels, one value each module-wide: segment, allocator,
// token and snowflake name these same values (segment.ErrUnknownTag is
// ErrUnknownTag), so an error means one thing wherever it is matched.
var (
	// ErrUnknownTag: no such tag (segment.ErrUnknownTag).
	ErrUnknownTag = NewError(CodeUnknownTag, "unknown biz_tag")
	// ErrInvalidTag: not a valid tag name (segment.ErrInvalidTag).
	ErrInvalidTag = NewError(CodeInvalidTag, "invalid biz_tag")
	// ErrUnavailable: no ID in time, the store cannot be reached
	// (segment.ErrUnavailable).
	ErrUnavailable = NewError(CodeUnavailable, "no ids available")
	// ErrRolledBack: a granted range at or below IDs already granted
	// (segment.ErrRolledBack).
	ErrRolledBack = NewError(CodeRolledBack, "granted range is below ids already granted (database rolled back?)")

	// ErrExhausted: the tag's next segment would pass 2^63-1
	// (allocator.ErrExhausted).
	ErrExhausted = NewError(CodeExhausted, "biz_tag exhausted: no ids left below 2^63-1")
	// ErrClosed: what was asked was closed, the instance is stopping: the
	// allocator, a segment buffer, the Snowflake node, a client
	// (allocator.ErrClosed, segment.ErrClosed, snowflake.ErrClosed,
	// client.ErrClosed: one value).
	ErrClosed = NewLocalError(CodeShuttingDown, "closed")
	// ErrShareExhausted: the region's share holds no ID above the tag's
	// max_id: its database was fenced (a split) and has no epoch above
	// (allocator.ErrShareExhausted).
	ErrShareExhausted = NewError(CodeShareExhausted, "the region's share holds no ids above the tag's max_id")
	// ErrRegionConflict: this region's share may overlap a peer's, or the
	// instance's region is not its database's (region.ErrConflict).
	ErrRegionConflict = NewError(CodeRegionConflict, "region shares conflict: not granting")
	// ErrTagExists: a tag being created exists (allocator.ErrExists).
	ErrTagExists = NewError(CodeTagExists, "biz_tag already exists")
	// ErrInvalidTagSpec: tag settings out of bounds (allocator.ErrInvalidSpec).
	ErrInvalidTagSpec = NewError(CodeInvalidSpec, "invalid tag settings")
	// ErrNotRaised: a bump that changed nothing (allocator.ErrNotRaised).
	ErrNotRaised = NewError(CodeNotRaised, "max_id not raised")
	// ErrNotHolder: the request ID is another caller's (allocator.ErrNotHolder).
	ErrNotHolder = NewError(CodeNotHolder, "request_id belongs to another caller")
	// ErrFloorBudget: a claimed floor with no budget left to raise max_id
	// to it (allocator.ErrFloorBudget).
	ErrFloorBudget = NewError(CodeRateLimited, "claimed floor above the tag's max_id, and no budget left to raise max_id to it")
	// ErrGivenBack: the request's whole range was given back
	// (allocator.ErrGivenBack).
	ErrGivenBack = NewError(CodeGivenBack, "range given back in full: the request keeps no ids")
	// ErrRequestConflict: the request ID was another tag's
	// (allocator.ErrRequestConflict).
	ErrRequestConflict = NewError(CodeRequestConflict, "request_id already used for another biz_tag")

	// ErrUnknownToken: no token has this ID (token.ErrUnknown).
	ErrUnknownToken = NewError(CodeUnknownToken, "unknown token")
	// ErrInvalidTokenSpec: token settings out of bounds (token.ErrInvalid).
	ErrInvalidTokenSpec = NewError(CodeInvalidSpec, "invalid token settings")

	// The snowflake package's (snowflake.ErrInvalidID and so on).
	ErrInvalidSnowflake      = NewError(CodeInvalidID, "invalid snowflake id")
	ErrSnowflakeNoWorker     = NewError(CodeSnowflakeNoWorker, "no snowflake worker id held")
	ErrSnowflakeLeaseExpired = NewError(CodeSnowflakeLeaseExpired, "snowflake worker lease window over")
	ErrSnowflakeClockSkew    = NewError(CodeSnowflakeClockSkew, "clock differs from the database's by more than the margin")
	ErrSnowflakeBackwards    = NewError(CodeSnowflakeBackwards, "clock behind the last timestamp used")
	ErrSnowflakeExhausted    = NewError(CodeSnowflakeExhausted, "snowflake time bits exhausted")
)
