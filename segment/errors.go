package segment

import (
	"errors"
	"fmt"
	"time"

	"github.com/idmint/idmint/wire"
)

// The package's errors: a Buffer's, a Set's, and the classes of a Source's
// answers. Callers check them with errors.Is.
var (
	// ErrUnavailable means both ranges are empty and no new range arrived in
	// time. The wrapped error, if any, is the last load failure.
	ErrUnavailable = wire.ErrUnavailable
	// ErrClosed means the buffer was closed.
	ErrClosed = wire.ErrClosed
	// ErrRolledBack means a granted range started at or below the highest ID
	// this buffer was ever granted: the database went back in time.
	ErrRolledBack = wire.ErrRolledBack

	// ErrUnknownTag means the source does not know the tag. A Set keeps
	// no buffer for it, and answers it from memory for a while.
	ErrUnknownTag = wire.ErrUnknownTag
	// ErrInvalidTag means the tag is not a valid name (see ValidateTag).
	ErrInvalidTag = wire.ErrInvalidTag

	// The errors below classify a Source's answers (see Classify): each
	// says what a Set's load does next with its ask (see loadRun.step).

	// ErrNotFound: Lookup found nothing committed for the request; it is
	// sent again.
	ErrNotFound = errors.New("request not found")
	// ErrAlreadyGranted: Grant found the request granted before; it is
	// only looked up from then on.
	ErrAlreadyGranted = errors.New("request already granted")
	// ErrAmbiguous: the grant may or may not have committed (reply lost,
	// not confirmed on the standbys); it is looked up before it is sent
	// again, and kept for the tag's next load when the load gives up.
	ErrAmbiguous = errors.New("outcome unknown")
	// ErrNotHeld: the request ID is settled with no range for this Set
	// (another caller holds it, it was another tag's, or its range was
	// given back in full); the load goes on with a new request.
	ErrNotHeld = errors.New("request settled without a range for this set")
	// ErrRefused: nothing was granted and asking again will not help
	// (unknown tag, tag exhausted); the load fails with the error.
	ErrRefused = errors.New("request refused")
)

// Classify returns err marked as kind, one of ErrNotFound,
// ErrAlreadyGranted, ErrAmbiguous, ErrNotHeld and ErrRefused: it reads as
// err, and errors.Is finds both kind and what err wraps.
func Classify(kind, err error) error {
	if err == nil {
		return kind
	}
	return &classified{kind: kind, err: err}
}

type classified struct{ kind, err error }

func (c *classified) Error() string   { return c.err.Error() }
func (c *classified) Unwrap() []error { return []error{c.err, c.kind} }

// UnavailableError is returned while the buffer backs off after a failed
// load. It matches ErrUnavailable with errors.Is and wraps the load error.
type UnavailableError struct {
	Tag        string
	RetryAfter time.Duration
	Err        error
}

func (e *UnavailableError) Error() string {
	if errors.Is(e.Err, ErrRefused) {
		// Asking again will not help (a 403, an unknown tag): a retry hint
		// would tell a reader of the log otherwise.
		return fmt.Sprintf("tag %q: no ids available, the load was refused: %v", e.Tag, e.Err)
	}
	return fmt.Sprintf("tag %q: no ids available, retry in %v: %v", e.Tag, e.RetryAfter.Round(time.Millisecond), e.Err)
}

// Is reports ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the load error.
func (e *UnavailableError) Unwrap() error { return e.Err }
