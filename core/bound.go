package core

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Bounded is a call's context bounded by the core's RequestTimeout, made
// lazily: the deadline is known from the start, but the timer behind Done
// exists only once something waits on it, which a call served from memory
// never does. A transport embeds it in its own per-call context (Bound
// fills it in), answers its own keys in Value and hands the rest to
// Bounded.Value, and calls Finish when the call is over.
type Bounded struct {
	context.Context // the transport's: cancelled when the caller goes away
	core            *Core
	start           time.Time // when the call came

	// deadline is start plus the request timeout at the round trip of the
	// moment, worked out on first use (deadlineOnce).
	deadlineOnce sync.Once
	deadline     time.Time

	once    sync.Once
	made    atomic.Bool     // set once bounded is made
	bounded context.Context // Context with the deadline, made by bound
	cancel  context.CancelFunc
}

// Bound fills in b, the bounded context of a call that came at start on
// ctx. b is part of the transport's per-call value, so that a call costs
// one allocation, not a context per concern.
func (c *Core) Bound(b *Bounded, ctx context.Context, start time.Time) {
	b.Context, b.core, b.start = ctx, c, start
}

// Start is when the call came.
func (b *Bounded) Start() time.Time { return b.start }

// Deadline implements context.Context: the earlier of the transport's and
// the core's.
func (b *Bounded) Deadline() (time.Time, bool) {
	own := b.ownDeadline()
	if d, ok := b.Context.Deadline(); ok && d.Before(own) {
		return d, true
	}
	return own, true
}

// ownDeadline returns the call's deadline, working it out once.
func (b *Bounded) ownDeadline() time.Time {
	b.deadlineOnce.Do(func() { b.deadline = b.start.Add(b.core.RequestTimeout()) })
	return b.deadline
}

// Done implements context.Context; the first call starts the timer.
func (b *Bounded) Done() <-chan struct{} { return b.bound().Done() }

// Err implements context.Context.
func (b *Bounded) Err() error { return b.bound().Err() }

// Value implements context.Context for the keys the transport does not
// answer itself. Once the bounded context exists, keys of the context
// package itself (how a child finds its parent's cancellation) must see it.
func (b *Bounded) Value(key any) any {
	if b.made.Load() {
		return b.bounded.Value(key)
	}
	return b.Context.Value(key)
}

// bound returns the call's context with its deadline, making it on first
// use. After Finish it is the transport's context.
func (b *Bounded) bound() context.Context {
	b.once.Do(func() {
		b.bounded, b.cancel = context.WithDeadline(b.Context, b.ownDeadline())
		b.made.Store(true)
	})
	if b.bounded == nil {
		return b.Context
	}
	return b.bounded
}

// Finish stops the timer, if one was started.
func (b *Bounded) Finish() {
	b.once.Do(func() {})
	if b.cancel != nil {
		b.cancel()
	}
}
