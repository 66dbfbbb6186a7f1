package segment

import (
	"context"
	"time"
)

// Grant is a range handed to a buffer by its Loader.
type Grant struct {
	Range
	// MinStep and MaxStep are the tag's bounds when the range was granted;
	// MaxStep 0 means DefaultMaxStep.
	MinStep, MaxStep int64
	// RequestID identifies the allocation that produced the range.
	RequestID string
	// Recovered is true when the reply to the allocation was lost and the
	// range was found again by its request ID.
	Recovered bool
	// Repaired is true when the store found the tag's high-water mark below
	// the buffer's floor (the database went back in time) and raised it to
	// the floor before granting the range above it.
	Repaired bool
	// Runway is the tag's own runway when the range was granted; 0 leaves
	// the buffer's Config.Runway.
	Runway time.Duration
}

// Loader fetches the next range for a buffer. size 0 asks for the tag's own
// step. Load may grant another size than asked (the store has the last word).
// It returns soon after ctx ends (Buffer.Close waits for it then), with the
// range if one was granted meanwhile: Close reports that range as unused.
type Loader interface {
	Load(ctx context.Context, size int64) (Grant, error)
}

// LoaderFunc adapts a function to the Loader interface.
type LoaderFunc func(ctx context.Context, size int64) (Grant, error)

// Load calls f(ctx, size).
func (f LoaderFunc) Load(ctx context.Context, size int64) (Grant, error) { return f(ctx, size) }
