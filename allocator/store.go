package allocator

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// Errors returned by the allocator and its stores.
var (
	// ErrUnknownTag means the tag has no row in the store. Tags are never
	// created by a request for them.
	ErrUnknownTag = segment.ErrUnknownTag
	// ErrInvalidTag means the tag is not a valid name (see ValidateTag).
	ErrInvalidTag = segment.ErrInvalidTag
	// ErrExhausted means the tag's next segment would pass 2^63-1.
	ErrExhausted = wire.ErrExhausted
	// ErrUnavailable means no ID could be handed out in time: the buffers
	// are empty and the store cannot be reached.
	ErrUnavailable = segment.ErrUnavailable
	// ErrRolledBack means a range at or below one already granted reached a
	// buffer (a store that ignores Request.Floor): the database went back in
	// time, and the range is refused.
	ErrRolledBack = segment.ErrRolledBack
	// ErrClosed means the allocator was closed.
	ErrClosed = wire.ErrClosed

	// ErrAlreadyGranted is returned by Store.Allocate when the request ID
	// was granted before: look it up.
	ErrAlreadyGranted = segment.ErrAlreadyGranted
	// ErrNotFound is returned by Store.Lookup for a request ID with no
	// committed segment.
	ErrNotFound = segment.ErrNotFound
	// ErrAmbiguous wraps store errors after which the allocation may or may
	// not have committed (connection lost after the statement was sent).
	ErrAmbiguous = segment.ErrAmbiguous
	// ErrExists means a tag being created already exists.
	ErrExists = wire.ErrTagExists
	// ErrInvalidSpec means tag settings out of bounds (step, max_step,
	// start, description, a bump with both or neither of to and by).
	ErrInvalidSpec = wire.ErrInvalidTagSpec
	// ErrNotRaised means a Bump changed nothing: max_id is already at or
	// above the value asked for.
	ErrNotRaised = wire.ErrNotRaised
	// ErrNotReplicated wraps store errors after a grant committed but could
	// not be confirmed on the standbys a ReplicationConfig requires: it
	// must not be served yet. Look it up later (the lookup confirms again).
	ErrNotReplicated = errors.New("grant not confirmed on the required standbys")
	// ErrNotHolder means a request ID was granted to another caller (or to
	// an instance): a retried grant or a give-back must come from the
	// principal that made the request, with the same holder key.
	ErrNotHolder = wire.ErrNotHolder
	// ErrFloorBudget is returned by Store.Allocate for a request whose
	// ClaimedFloor is above the tag's max_id while it has no lead left to
	// raise it with (Request.MaxLead 0): nothing changed.
	ErrFloorBudget = wire.ErrFloorBudget
	// ErrGivenBack is returned by Store.Lookup for a request whose whole
	// range was given back: it keeps nothing.
	ErrGivenBack = wire.ErrGivenBack
)

// Store is everything a backend provides: the grants and give-backs of
// segments and ranges (Granter), the administration of tags (Admin) and the
// bearer tokens (token.Store). Each backend is a package beside this one:
// postgres (production), sqlite (one machine), memstore (one process, and
// tests). The contract they all keep is testkit/storetest.
type Store interface {
	Granter
	Admin
	token.Store
}

// Granter is the source of truth for tags' high-water marks: it grants
// segments (to an instance) and ranges (to a caller) under their request
// IDs, and takes their unused tails back.
type Granter interface {
	// Allocate advances the tag's max_id by one segment and records the
	// request ID, as one atomic step, and returns the segment. When max_id
	// is below req.Floor it is first raised to it, in the same step, and the
	// segment says so (Repaired); so does a caller's req.ClaimedFloor, by
	// at most req.MaxLead, and the segment says by how much (Lead). It
	// returns ErrAlreadyGranted when req.ID was granted before,
	// ErrUnknownTag, ErrExhausted, ErrFloorBudget (see FloorRefused), or an
	// error wrapping ErrAmbiguous when it cannot tell whether the
	// allocation committed.
	Allocate(ctx context.Context, req Request) (Segment, error)
	// Lookup returns the segment granted to a request ID, with its Holder,
	// or ErrNotFound. A segment whose tail was given back is returned
	// without it ([First, returned_from - 1]); one given back in full is
	// ErrGivenBack, returned with the segment's RequestID, Tag, First and
	// Holder (Last is then First - 1).
	Lookup(ctx context.Context, id uuid.UUID) (Segment, error)
	// GiveBack gives back an instance's segment tail when it shuts down:
	// it lowers the tag's max_id to first-1, but only if max_id is still
	// last: nobody was granted anything after [first, last], so nobody can
	// have handed out an ID in it but its owner, who is closing. It reports
	// whether it did; false is no error, the range stays a gap. The store
	// records the give-back in its segment log in the same atomic step, so
	// that the log alone explains every ID.
	GiveBack(ctx context.Context, tag string, first, last int64) (bool, error)
	// GiveBackRange gives back a caller's range tail (see
	// Allocator.GiveBackRange): it lowers the tag's max_id to first-1, but
	// only if request id is held by h (the same principal and holder key
	// hash; an instance's segment is held by nobody), [first, last] is the
	// tail of the range granted to it, max_id is still last, and no other
	// request keeps an ID at or above first (one given back in full keeps
	// none); the holder is
	// checked in the same atomic step as the rest. It reports whether it
	// did; false is no error. A request held by another (or by an instance)
	// is ErrNotHolder, and changes nothing.
	GiveBackRange(ctx context.Context, id uuid.UUID, h Holder, tag string, first, last int64) (bool, error)
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
	// ClaimedFloor is a floor a caller claims (the highest ID a client was
	// granted for the tag), untrusted: it raises max_id as Floor does, but
	// to at most MaxLead above the max_id found (or Floor, if higher; see
	// FloorOf), so that a caller costs the tag only the lead it was
	// charged for, never its ID space.
	ClaimedFloor int64
	// MaxLead is how far ClaimedFloor may raise max_id in this grant: the
	// caller's budget, bounded by MaxClaimedLead (0 or less: not at all).
	// With no budget, a ClaimedFloor above max_id (and Floor) is refused
	// with ErrFloorBudget, in the same atomic step, and nothing changes:
	// the range granted would be below the floor the caller claims, of no
	// use to it, and the caller asks again once its budget refilled.
	MaxLead int64
	// Holder is who holds a caller's range, recorded in the segment log;
	// the zero Holder (an instance's own segments) is held by no caller.
	Holder Holder
}

// MaxClaimedLead bounds how far above the tag's max_id a Request's
// ClaimedFloor may raise it in one grant, whatever the caller's budget
// (Request.MaxLead): 2^32. A rollback that lost more than that of a
// client's grants takes that client several grants to repair (each refused
// range raises max_id by the lead again).
const MaxClaimedLead = 1 << 32

// FloorOf returns the floor a store raises max_id to for req, given the
// max_id found: req.Floor, or req.ClaimedFloor bounded to LeadOf(req)
// above max(maxID, req.Floor), whichever is higher.
func FloorOf(maxID int64, req Request) int64 {
	base := max(maxID, req.Floor)
	claimed := req.ClaimedFloor
	if lead := LeadOf(req); claimed-base > lead { // both >= 0: no overflow
		claimed = base + lead // below claimed: no overflow
	}
	return max(req.Floor, claimed)
}

// LeadOf is how far req's ClaimedFloor may raise max_id: req.MaxLead,
// from 0 to MaxClaimedLead.
func LeadOf(req Request) int64 { return min(max(req.MaxLead, 0), MaxClaimedLead) }

// FloorRefused reports whether a store refuses req at the max_id found
// (ErrFloorBudget): its ClaimedFloor is above max_id and req.Floor, and it
// has no lead to raise max_id with.
func FloorRefused(maxID int64, req Request) bool {
	return LeadOf(req) == 0 && req.ClaimedFloor > max(maxID, req.Floor)
}

// ClaimedLeadOf is the lead of a grant for req whose floor (FloorOf) was
// floor at the max_id found: the IDs skipped for req's ClaimedFloor, above
// that max_id and req.Floor.
func ClaimedLeadOf(maxID, floor int64, req Request) int64 {
	return max(floor-max(maxID, req.Floor), 0)
}

// Holder is who holds a caller's range: the principal that asked for it
// (a bearer token's ID, or "anonymous" in the open mode) and the SHA-256
// of the secret holder key the caller chose with its request ID. The key
// itself is never kept.
type Holder struct {
	Principal string
	KeyHash   [sha256.Size]byte
}

// NewHolder returns the Holder of principal with the holder key key.
func NewHolder(principal, key string) Holder {
	return Holder{Principal: principal, KeyHash: sha256.Sum256([]byte(key))}
}

// IsZero reports whether h is nobody's: an instance's own segment.
func (h Holder) IsZero() bool { return h == Holder{} }

// Matches reports whether o is h, and h is somebody's: the zero Holder
// matches nothing, not even itself. The hashes compare in constant time.
func (h Holder) Matches(o Holder) bool {
	if h.IsZero() || o.IsZero() {
		return false
	}
	return subtle.ConstantTimeCompare(h.KeyHash[:], o.KeyHash[:]) == 1 && h.Principal == o.Principal
}

// String never shows the hash: a Holder may end up in a log line.
func (h Holder) String() string {
	if h.IsZero() {
		return "instance"
	}
	return "holder of " + h.Principal
}

// Segment is a granted range and the tag's step bounds at that moment.
type Segment struct {
	RequestID   uuid.UUID
	Tag         string
	First, Last int64
	Step        int64 // the tag's minimum segment size
	MaxStep     int64 // the tag's maximum segment size; 0 when unset
	// Runway is the tag's runway (0: the instance's).
	Runway time.Duration
	// Repaired is true when max_id was below the request's Floor (or its
	// ClaimedFloor) and was raised to it; FoundMaxID is the max_id found,
	// raised or not. Only Allocate sets them.
	Repaired   bool
	FoundMaxID int64
	// Lead is how far the request's ClaimedFloor raised max_id: the IDs
	// skipped between the max_id found (or the request's Floor, if higher)
	// and the range (ClaimedLeadOf), which the caller is charged for. Only
	// Allocate sets it.
	Lead int64
	// Holder holds the segment: the request's (Allocate), the log's
	// (Lookup); zero for an instance's own.
	Holder Holder
}

// Tag describes one tag's row.
type Tag struct {
	Name    string
	MaxID   int64
	Step    int64
	MaxStep int64 // 0 when unset
	// Runway is how long the buffers must carry the tag's callers without
	// the store at the recent peak rate; 0 leaves the instance's.
	Runway      time.Duration
	Description string
}

// ValidateTag reports whether name is a valid tag: 1 to 64 characters of
// letters, digits, '_', '.', ':' and '-', starting with a letter or digit
// (see segment.ValidateTag). Its error quotes at most 80 bytes of name.
func ValidateTag(name string) error { return segment.ValidateTag(name) }

// SizeOf returns the size a store grants for a request: the wanted size
// bounded by the tag's step and max_step (segment.DefaultMaxStep when
// unset). It matches the SQL of the postgres store.
func SizeOf(want, step, maxStep int64) int64 {
	hi := maxStep
	if hi <= 0 {
		hi = segment.DefaultMaxStep
	}
	return max(step, min(want, hi))
}
