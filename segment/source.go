package segment

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Source feeds the tags of a Set: it grants ranges idempotently by request
// ID. The allocator's wraps its Store (whose grant part is
// allocator.Granter), the client's the /v1/segments endpoints of idmint
// instances. Its errors are classified with Classify (see ErrNotFound,
// ErrAlreadyGranted, ErrAmbiguous, ErrNotHeld, ErrRefused); an error of no
// class means nothing was granted, and the ask is sent again after a
// pause.
type Source interface {
	// Grant asks for a range for ask. Sent again with the same ask.ID it
	// grants nothing new: it answers the range granted before (or
	// ErrAlreadyGranted, to look it up).
	Grant(ctx context.Context, ask Ask) (Grant, error)
	// Lookup returns the range committed for ask.ID, with Recovered set,
	// or ErrNotFound when nothing is committed for it (yet).
	Lookup(ctx context.Context, ask Ask) (Grant, error)
	// GiveBack returns r, the unused tail of the range granted to ask, and
	// reports whether the source took it back: only when nobody was
	// granted anything after it. false is no error; the IDs stay a gap.
	GiveBack(ctx context.Context, ask Ask, r Range) (bool, error)
}

// Ask is one request of a Set's tag for a range, as its Source receives
// it. Its ID, the request ID, is chosen before the first attempt, and
// every retry sends the same one (so does a later load that resumes it),
// so that a source grants it at most once.
type Ask struct {
	ID uuid.UUID
	// Key is a secret chosen with ID when SetConfig.HolderKeys is set (32
	// random bytes in unpadded base64url): it proves to the source that
	// the range is this Set's on a retry and at the give-back. Empty
	// otherwise.
	Key string
	Tag string
	// Size is the size the tag's buffer asked for; 0 asks for the tag's
	// step.
	Size int64
	// Floor is the highest ID granted to the tag here (0: none): a source
	// whose high-water mark went below it (the database went back in time)
	// raises it to Floor and grants above.
	Floor int64
	// Since is when the load that chose the ask began.
	Since time.Time
}
