package allocator

import (
	"context"
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// Admin manages a store's tags: what `idmint tag` and an operator need.
// Every Store is one; so is the admin client of `idmint tag --server`.
type Admin interface {
	// CreateTag adds a tag. It returns ErrExists if the tag exists.
	CreateTag(ctx context.Context, spec TagSpec) (Tag, error)
	// Tags returns every tag, sorted by name.
	Tags(ctx context.Context) ([]Tag, error)
	// SetStep changes a tag's minimum and maximum segment size (maxStep 0
	// unsets the maximum). Instances apply it from their next segment load.
	SetStep(ctx context.Context, name string, step, maxStep int64) (Tag, error)
	// Bump raises a tag's max_id to at least to, or by by: the operator's
	// way out after the database went back in time (restored backup,
	// lagging replica). It never lowers max_id: when to is not above it,
	// it changes nothing and returns the tag with ErrNotRaised.
	Bump(ctx context.Context, name string, to, by int64) (Tag, error)
	// Describe changes a tag's description (at most 1000 characters).
	Describe(ctx context.Context, name, description string) (Tag, error)
	// SetRunway changes a tag's runway (0: the instance's, at most
	// MaxRunway, whole milliseconds). Instances apply it from their next
	// segment load.
	SetRunway(ctx context.Context, name string, runway time.Duration) (Tag, error)
}

// MaxRunway bounds a tag's runway, as the schemas' CHECK does: a day. The
// IDs a runway keeps in memory are a gap when an instance crashes, and
// max_step bounds what one range holds anyway.
const MaxRunway = 24 * time.Hour

// DefaultStep is the step of a tag created without one.
const DefaultStep = 1000

// TagSpec describes a tag to create.
type TagSpec struct {
	Name    string
	Step    int64 // minimum segment size (default DefaultStep)
	MaxStep int64 // maximum segment size; 0 leaves it unset (1,000,000)
	Start   int64 // first ID to hand out (default 1)
	// Runway is the tag's runway (0: the instance's; see Admin.SetRunway).
	Runway      time.Duration
	Description string
}

// WithDefaults fills spec's defaults and checks it against the bounds the
// schemas enforce, so every store refuses the same specs with the same
// words. A store's CreateTag calls it first.
func (spec TagSpec) WithDefaults() (TagSpec, error) {
	if err := ValidateTag(spec.Name); err != nil {
		return TagSpec{}, err
	}
	if spec.Step == 0 {
		spec.Step = DefaultStep
	}
	if spec.Start == 0 {
		spec.Start = 1
	}
	if err := CheckSteps(spec.Step, spec.MaxStep); err != nil {
		return TagSpec{}, err
	}
	if spec.Start < 1 {
		return TagSpec{}, fmt.Errorf("%w: start %d: must be at least 1", ErrInvalidSpec, spec.Start)
	}
	if top := lastStart(spec.Step); spec.Start > top {
		return TagSpec{}, fmt.Errorf("%w: start %d: leaves no room for one segment of step %d below 2^63-1: at most %d", ErrInvalidSpec, spec.Start, spec.Step, top)
	}
	if err := CheckDescription(spec.Description); err != nil {
		return TagSpec{}, err
	}
	if err := CheckRunway(spec.Runway); err != nil {
		return TagSpec{}, err
	}
	return spec, nil
}

// CheckSteps checks a tag's step and max_step (0: unset) against the
// bounds the schemas enforce (ErrInvalidSpec).
func CheckSteps(step, maxStep int64) error {
	const limit = 100_000_000 // the schema's CHECK
	if step < 1 || step > limit {
		return fmt.Errorf("%w: step %d: must be between 1 and %d", ErrInvalidSpec, step, limit)
	}
	if maxStep != 0 && (maxStep < step || maxStep > limit) {
		return fmt.Errorf("%w: max_step %d: must be between step (%d) and %d", ErrInvalidSpec, maxStep, step, limit)
	}
	return nil
}

// CheckBump checks a Bump's arguments: exactly one of to and by, positive
// (ErrInvalidSpec).
func CheckBump(to, by int64) error {
	if to < 0 || by < 0 || (to == 0) == (by == 0) {
		return fmt.Errorf("%w: bump: give exactly one of to or by, positive", ErrInvalidSpec)
	}
	return nil
}

// lastStart is the highest first ID that leaves room for one segment of
// step below 2^63-1 (step is at least 1).
func lastStart(step int64) int64 { return math.MaxInt64 - step + 1 }

// Bumped returns the max_id a Bump of t sets. It returns ErrNotRaised when
// to does not raise t's max_id, and an error wrapping ErrInvalidSpec and
// ErrExhausted when the new max_id would leave no room for one segment of
// the tag's step below 2^63-1: such a bump would end the tag, not repair it.
func Bumped(t Tag, to, by int64) (int64, error) {
	top := lastStart(t.Step) - 1 // the highest max_id with room for a segment
	if to > 0 {
		if to <= t.MaxID {
			return t.MaxID, fmt.Errorf("%w: max_id is already %d, at or above %d", ErrNotRaised, t.MaxID, to)
		}
		if to > top {
			return 0, fmt.Errorf("%w: bump to %d: leaves no room for one segment of step %d below 2^63-1: at most %d (%w)", ErrInvalidSpec, to, t.Step, top, ErrExhausted)
		}
		return to, nil
	}
	if t.MaxID > top || by > top-t.MaxID {
		return 0, fmt.Errorf("%w: bump by %d: leaves no room for one segment of step %d below 2^63-1: at most %d from max_id %d (%w)", ErrInvalidSpec, by, t.Step, max(top-t.MaxID, 0), t.MaxID, ErrExhausted)
	}
	return t.MaxID + by, nil
}

// CheckDescription bounds a description as the schemas do
// (ErrInvalidSpec).
func CheckDescription(d string) error {
	if n := utf8.RuneCountInString(d); n > 1000 {
		return fmt.Errorf("%w: description: %d characters, at most 1000", ErrInvalidSpec, n)
	}
	return nil
}

// CheckRunway refuses a runway out of the schemas' bounds, or finer than
// the millisecond they store.
func CheckRunway(runway time.Duration) error {
	if runway < 0 || runway > MaxRunway || runway%time.Millisecond != 0 {
		return fmt.Errorf("%w: runway %v: must be between 0 and %v, in whole milliseconds", ErrInvalidSpec, runway, MaxRunway)
	}
	return nil
}
