package allocator

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/google/uuid"

	"github.com/idmint/idmint/segment"
)

// Errors returned by the allocator and its stores.
var (
	// ErrUnknownTag means the tag has no row in the store. Tags are never
	// created by a request for them.
	ErrUnknownTag = errors.New("unknown biz_tag")
	// ErrInvalidTag means the tag is not a valid name (see ValidateTag).
	ErrInvalidTag = errors.New("invalid biz_tag")
	// ErrExhausted means the tag's next segment would pass 2^63-1.
	ErrExhausted = errors.New("biz_tag exhausted: no ids left below 2^63-1")
	// ErrUnavailable means no ID could be handed out in time: the buffers
	// are empty and the store cannot be reached.
	ErrUnavailable = segment.ErrUnavailable
	// ErrRolledBack means a range at or below one already granted reached a
	// buffer (a store that ignores Request.Floor): the database went back in
	// time, and the range is refused.
	ErrRolledBack = segment.ErrRolledBack
	// ErrClosed means the allocator was closed.
	ErrClosed = errors.New("allocator closed")

	// ErrAlreadyGranted is returned by Store.Allocate when the request ID
	// was granted before: look it up.
	ErrAlreadyGranted = errors.New("request already granted")
	// ErrNotFound is returned by Store.Lookup for a request ID with no
	// committed segment.
	ErrNotFound = errors.New("request not found")
	// ErrAmbiguous wraps store errors after which the allocation may or may
	// not have committed (connection lost after the statement was sent).
	ErrAmbiguous = errors.New("outcome unknown")
	// ErrExists means a tag being created already exists.
	ErrExists = errors.New("biz_tag already exists")
	// ErrInvalidSpec means tag settings out of bounds (step, max_step,
	// start, description, a bump with both or neither of to and by).
	ErrInvalidSpec = errors.New("invalid tag settings")
	// ErrNotRaised means a Bump changed nothing: max_id is already at or
	// above the value asked for.
	ErrNotRaised = errors.New("max_id not raised")
	// ErrNotReplicated wraps store errors after a grant committed but could
	// not be confirmed on the standbys a ReplicationConfig requires: it
	// must not be served yet. Look it up later (the lookup confirms again).
	ErrNotReplicated = errors.New("grant not confirmed on the required standbys")
)

// Store is the source of truth for tags' high-water marks.
type Store interface {
	// Allocate advances the tag's max_id by one segment and records the
	// request ID, as one atomic step, and returns the segment. When max_id
	// is below req.Floor it is first raised to it, in the same step, and the
	// segment says so (Repaired). It returns ErrAlreadyGranted when req.ID
	// was granted before, ErrUnknownTag, ErrExhausted, or an error wrapping
	// ErrAmbiguous when it cannot tell whether the allocation committed.
	Allocate(ctx context.Context, req Request) (Segment, error)
	// Lookup returns the segment granted to a request ID, or ErrNotFound.
	Lookup(ctx context.Context, id uuid.UUID) (Segment, error)
	// Ping reports whether the store can be reached.
	Ping(ctx context.Context) error
}

// Request asks a Store for one segment.
type Request struct {
	ID       uuid.UUID // chosen before the first attempt; retries reuse it
	Tag      string
	Size     int64 // wanted size; 0 means the tag's step. The store bounds it by step and max_step
	Instance string
	// Floor is the highest ID the instance was ever granted for the tag (0:
	// none). When the tag's max_id is below it the database went back in
	// time: the store raises max_id to Floor (never lowers it) and grants
	// the segment above, in the same atomic step, so that the instance
	// serves again and nobody is granted its lost IDs after it.
	Floor int64
}

// Returner is implemented by stores that can take back the unused tail of a
// segment when an instance shuts down.
type Returner interface {
	// GiveBack lowers the tag's max_id to first-1, but only if max_id is
	// still last: nobody was granted anything after [first, last], so
	// nobody can have handed out an ID in it but its owner, who is closing.
	// It reports whether it did; false is no error, the range stays a gap.
	// A store with a segment log records the give-back there in the same
	// atomic step, so that the log alone explains every ID.
	GiveBack(ctx context.Context, tag string, first, last int64) (bool, error)
}

// Segment is a granted range and the tag's step bounds at that moment.
type Segment struct {
	RequestID   uuid.UUID
	Tag         string
	First, Last int64
	Step        int64 // the tag's minimum segment size
	MaxStep     int64 // the tag's maximum segment size; 0 when unset
	// Repaired is true when max_id was below the request's Floor and was
	// raised to it; FoundMaxID is the max_id found then. Only Allocate sets
	// them.
	Repaired   bool
	FoundMaxID int64
}

// Tag describes one tag's row.
type Tag struct {
	Name        string
	MaxID       int64
	Step        int64
	MaxStep     int64 // 0 when unset
	Description string
}

var tagPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)

// ValidateTag reports whether name is a valid tag: 1 to 64 characters of
// letters, digits, '_', '.', ':' and '-', starting with a letter or digit.
// Its error quotes at most 80 bytes of name.
func ValidateTag(name string) error {
	if !tagPattern.MatchString(name) {
		return fmt.Errorf("%w: %q: want 1-64 of [A-Za-z0-9_.:-], starting with a letter or digit", ErrInvalidTag, truncate(name, 80))
	}
	return nil
}

// bounds returns the size a store grants for a request: the wanted size
// bounded by the tag's step and max_step. It matches the SQL of Postgres.
func bounds(want, step, maxStep int64) int64 {
	hi := maxStep
	if hi <= 0 {
		hi = segment.DefaultMaxStep
	}
	return max(step, min(want, hi))
}
