package wire

import "time"

// Tag is a tag as the admin API shows it. max_id is a string, as IDs are
// everywhere in the API; max_step is the one in force: a tag created
// without one shows the default (1,000,000), as `tag list` does.
type Tag struct {
	Tag         string `json:"biz_tag"`
	MaxID       int64  `json:"max_id,string"`
	Step        int64  `json:"step"`
	MaxStep     int64  `json:"max_step"`
	Description string `json:"description"`
	// RunwaySeconds is the tag's runway; 0 leaves the instance's --runway.
	RunwaySeconds float64 `json:"runway_seconds"`
}

// Tags is the reply of GET /v1/tags.
type Tags struct {
	Tags []Tag `json:"tags"`
}

// CreateTagRequest is the body of POST /v1/tags. A step or max_step left
// out takes the default; one given must be at least 1, so that a 0 sent by
// mistake is refused rather than read as "the default".
type CreateTagRequest struct {
	Tag           string  `json:"biz_tag"`
	Step          *int64  `json:"step"`
	MaxStep       *int64  `json:"max_step"`
	Start         int64   `json:"start"`
	Description   string  `json:"description"`
	RunwaySeconds float64 `json:"runway_seconds"`
}

// PatchTagRequest is the body of PATCH /v1/tags/{biz_tag}: the fields
// given change, the others stay.
type PatchTagRequest struct {
	Step          *int64   `json:"step"`
	MaxStep       *int64   `json:"max_step"`
	Description   *string  `json:"description"`
	RunwaySeconds *float64 `json:"runway_seconds"`
}

// BumpRequest is the body of POST /v1/tags/{biz_tag}/bump: exactly one of
// to and by.
type BumpRequest struct {
	To int64 `json:"to"`
	By int64 `json:"by"`
}

// Token is a token as the admin API shows it: never its secret, never its
// hash.
type Token struct {
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// IDsPerSecond is the token's own bound; 0: the instance's
	// --ids-per-second-per-token.
	IDsPerSecond float64    `json:"ids_per_second"`
	CreatedAt    time.Time  `json:"created_at"`
	RevokedAt    *time.Time `json:"revoked_at,omitempty"`
}

// Tokens is the reply of GET /v1/tokens.
type Tokens struct {
	Tokens []Token `json:"tokens"`
}

// CreateTokenRequest is the body of POST /v1/tokens.
type CreateTokenRequest struct {
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// IDsPerSecond is optional: 0 or absent for the instance's bound.
	IDsPerSecond float64 `json:"ids_per_second,omitempty"`
}

// CreatedToken is the reply of POST /v1/tokens: the one reply that holds
// the bearer token, which idmint keeps only as a hash.
type CreatedToken struct {
	Token Token `json:"token"`
	// Secret is the bearer token to send as "Authorization: Bearer …".
	Secret string `json:"secret"`
	Note   string `json:"note"`
}

// Standbys is the reply of GET /v1/standbys.
type Standbys struct {
	Standbys []StandbyRecord `json:"standbys"`
}

// ParsedSnowflake is the reply of /snowflake/parse (and of `idmint
// snowflake parse`).
type ParsedSnowflake struct {
	ID       int64     `json:"id,string"`
	Time     time.Time `json:"time"`
	UnixMS   int64     `json:"unix_ms"`
	WorkerID int64     `json:"worker_id"`
	Sequence int64     `json:"sequence"`
	Layout   string    `json:"layout"`
	Epoch    time.Time `json:"epoch"`
}
