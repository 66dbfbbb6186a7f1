package core

import "context"

type requestIDKey struct{}

// RequestIDKey is the context key of a call's request ID. A transport
// whose context answers keys itself (httpapi's request context, which
// makes the ID only when asked) answers it; others use WithRequestID.
var RequestIDKey any = requestIDKey{}

// WithRequestID returns ctx carrying id as the call's request ID.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the call's request ID: the one its log lines and the
// ErrorInfo of its error reply carry; "" when none was set.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
