package faillog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Message is the message of the line a server logs for a request or call
// that failed on its side: an HTTP 5xx, or a gRPC code Connect answers
// with a 5xx (Unavailable, Internal, Unknown, DeadlineExceeded, …).
const Message = "request failed"

// Bounds of the failure log.
const (
	// failureLogEvery is how often a failure code may write a line.
	failureLogEvery = time.Second
	// maxFailureKeys bounds the codes tracked; codes are a fixed set, so
	// this only guards against a future caller logging something else.
	maxFailureKeys = 64
)

// logLimiter lets one line per key through per interval and counts the
// others, so that the next line written can say how many were dropped.
type logLimiter struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex // protects keys
	keys map[string]*limitedKey
}

type limitedKey struct {
	next       time.Time // when the next line may be written
	suppressed int64     // lines dropped since the last one written
}

func newLogLimiter(every time.Duration, now func() time.Time) *logLimiter {
	return &logLimiter{every: every, now: now, keys: map[string]*limitedKey{}}
}

// allow reports whether a line for key may be written now and, if so, how
// many lines for key it dropped since the last one it let through.
func (l *logLimiter) allow(key string) (ok bool, suppressed int64) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[key]
	if k == nil {
		if len(l.keys) >= maxFailureKeys {
			key = "other"
			k = l.keys[key]
		}
		if k == nil {
			k = &limitedKey{}
			l.keys[key] = k
		}
	}
	if now.Before(k.next) {
		k.suppressed++
		return false, 0
	}
	suppressed, k.suppressed = k.suppressed, 0
	k.next = now.Add(l.every)
	return true, suppressed
}

// failureLog passes every record on, but writes Message lines at most
// once a second per error code, the next line carrying "suppressed": how
// many were dropped.
type failureLog struct {
	next slog.Handler
	lim  *logLimiter
}

// New returns next limited: Message lines (those with a "code"
// attribute, the error's stable code) at most once a second per code,
// every other record as it is. now is the clock (nil: time.Now).
func New(next slog.Handler, now func() time.Time) slog.Handler {
	if now == nil {
		now = time.Now
	}
	return failureLog{next: next, lim: newLogLimiter(failureLogEvery, now)}
}

// Enabled implements slog.Handler.
func (h failureLog) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h failureLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message != Message {
		return h.next.Handle(ctx, r)
	}
	code := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "code" {
			code = a.Value.String()
			return false
		}
		return true
	})
	ok, suppressed := h.lim.allow(code)
	if !ok {
		return nil
	}
	if suppressed > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int64("suppressed", suppressed))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h failureLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return failureLog{next: h.next.WithAttrs(attrs), lim: h.lim}
}

// WithGroup implements slog.Handler.
func (h failureLog) WithGroup(name string) slog.Handler {
	return failureLog{next: h.next.WithGroup(name), lim: h.lim}
}
