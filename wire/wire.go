package wire

// Paths of the range endpoints.
const (
	PathSegments = "/v1/segments"
	PathGiveBack = "/v1/segments/giveback"
)

// Error codes: stable, machine-readable, part of the API. httpapi's error
// table says which error has which (docs/errors.md lists them); the client
// and cmd/idmint decide on them, never on messages.
const (
	CodeBadRequest            = "bad_request"
	CodeInvalidTag            = "invalid_biz_tag"
	CodeInvalidCount          = "invalid_count"
	CodeInvalidFormat         = "invalid_format"
	CodeInvalidSize           = "invalid_size"
	CodeInvalidRequestID      = "invalid_request_id"
	CodeInvalidRange          = "invalid_range"
	CodeInvalidHolderKey      = "invalid_holder_key"
	CodeInvalidFloor          = "invalid_floor"
	CodeInvalidID             = "invalid_id"
	CodeInvalidJSON           = "invalid_json"
	CodeInvalidSpec           = "invalid_request"
	CodeUnauthorized          = "unauthorized"
	CodeForbidden             = "forbidden"
	CodeUnknownTag            = "unknown_tag"
	CodeUnknownToken          = "unknown_token"
	CodeNotFound              = "not_found"
	CodeMethod                = "method_not_allowed"
	CodeRequestConflict       = "request_conflict"
	CodeNotHolder             = "not_holder"
	CodeGivenBack             = "given_back"
	CodeTagExists             = "tag_exists"
	CodeNotRaised             = "not_raised"
	CodeBodyTooLarge          = "body_too_large"
	CodeQueryTooLong          = "query_too_long"
	CodeRateLimited           = "rate_limited"
	CodeInternal              = "internal"
	CodeUnavailable           = "unavailable"
	CodeRolledBack            = "rolled_back"
	CodeExhausted             = "tag_exhausted"
	CodeShareExhausted        = "share_exhausted"
	CodeRegionConflict        = "region_conflict"
	CodeShuttingDown          = "shutting_down"
	CodeSnowflakeNoWorker     = "snowflake_no_worker"
	CodeSnowflakeLeaseExpired = "snowflake_lease_expired"
	CodeSnowflakeClockSkew    = "snowflake_clock_skew"
	CodeSnowflakeBackwards    = "snowflake_clock_backwards"
	CodeSnowflakeExhausted    = "snowflake_time_exhausted"
)

// ErrorBody is the body of every error reply.
type ErrorBody struct {
	Error struct {
		// Code is one of the Code constants.
		Code string `json:"code"`
		// Message is for people: it may change, never match on it.
		Message string `json:"message"`
	} `json:"error"`
}

// IDResponse is the JSON reply of GET /id. IDs travel as decimal strings:
// JSON numbers lose precision above 2^53 in many languages.
type IDResponse struct {
	Tag string `json:"biz_tag"`
	ID  int64  `json:"id,string"`
}

// IDsResponse is the JSON reply of GET /ids: the IDs as decimal strings,
// or with format=ranges their inclusive ranges as [first, last] pairs of
// decimal strings. It may hold fewer than count IDs (those taken before an
// error).
type IDsResponse struct {
	Tag    string      `json:"biz_tag"`
	IDs    []string    `json:"ids,omitempty"`
	Ranges [][2]string `json:"ranges,omitempty"`
}

// SegmentRequest is the body of POST /v1/segments.
type SegmentRequest struct {
	Tag string `json:"biz_tag"`
	// Size is the wanted number of IDs; 0 asks for the tag's step. The
	// grant is bounded by the tag's step and max_step.
	Size int64 `json:"size"`
	// RequestID is a UUID the caller chose before its first attempt and
	// reuses on every retry, through any instance. It is an idempotency
	// key, not a secret: instances log it.
	RequestID string `json:"request_id"`
	// HolderKey is a secret the caller chose with RequestID (e.g. 32 random
	// bytes in unpadded base64url) and sends again on every retry and with
	// the give-back: with the caller's principal it proves the range is
	// the caller's. Only its SHA-256 is stored; it is never logged.
	HolderKey string `json:"holder_key"`
	// Floor is the highest ID the caller was granted for the tag (0: none):
	// when the database went back in time below it, max_id is raised to
	// it (by at most allocator.MaxClaimedLead above max_id per grant), so
	// that the range granted is above it.
	Floor int64 `json:"floor,string,omitempty"`
}

// SegmentResponse is the reply of POST /v1/segments: the range granted to
// the request ID, the same one on every retry.
type SegmentResponse struct {
	Tag       string `json:"biz_tag"`
	RequestID string `json:"request_id"`
	First     int64  `json:"first,string"`
	Last      int64  `json:"last,string"`
	Step      int64  `json:"step"`
	MaxStep   int64  `json:"max_step"`
	// Recovered is true when the request ID had been granted before (a
	// retry after a lost reply): this is that range again.
	Recovered bool `json:"recovered"`
	// RunwaySeconds is the tag's own runway (0: none of its own, the
	// caller keeps its own). A client's buffer sizes its ranges for it in
	// place of its own runway when it is above 0, as an instance does.
	RunwaySeconds float64 `json:"runway_seconds"`
	// Region is the share of the region that granted the range (absent: a
	// single-region deployment), as its database held it at the grant: it
	// owns [First, Last]. A client of several regions checks each range
	// against the shares the other regions sent (Share.CheckRange).
	Region *Share `json:"region,omitempty"`
}

// GiveBackRequest is the body of POST /v1/segments/giveback: the unused
// tail [First, Last] of the range granted to RequestID, with the holder key
// of its grant, from the same principal.
type GiveBackRequest struct {
	Tag       string `json:"biz_tag"`
	RequestID string `json:"request_id"`
	HolderKey string `json:"holder_key"`
	First     int64  `json:"first,string"`
	Last      int64  `json:"last,string"`
}

// GiveBackResponse is the reply of POST /v1/segments/giveback (without
// the holder key). GivenBack false means the tag was allocated since (or
// the range is not the tail of the request's range): the IDs stay a gap.
type GiveBackResponse struct {
	Tag       string `json:"biz_tag"`
	RequestID string `json:"request_id"`
	First     int64  `json:"first,string"`
	Last      int64  `json:"last,string"`
	GivenBack bool   `json:"given_back"`
}
