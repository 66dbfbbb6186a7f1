package redact

import (
	"context"
	"log/slog"
	"strings"
)

// NewHandler returns a slog.Handler that passes every record to h with the
// errors in it redacted: attributes whose value is an error (by Error), and
// string attributes whose key names an error ("err", "error", "last_error",
// …; by String), in groups too, in the record and in WithAttrs.
func NewHandler(h slog.Handler) slog.Handler { return handler{h} }

type handler struct{ next slog.Handler }

// Enabled implements slog.Handler.
func (h handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs implements slog.Handler.
func (h handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = attr(a)
	}
	return handler{h.next.WithAttrs(clean)}
}

// WithGroup implements slog.Handler.
func (h handler) WithGroup(name string) slog.Handler { return handler{h.next.WithGroup(name)} }

// attr returns a with the errors in it redacted.
func attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindAny:
		if err, ok := v.Any().(error); ok && err != nil {
			return slog.String(a.Key, Error(err))
		}
	case slog.KindString:
		if errorKey(a.Key) {
			return slog.String(a.Key, String(v.String()))
		}
	case slog.KindGroup:
		group := v.Group()
		clean := make([]any, len(group))
		for i, g := range group {
			clean[i] = attr(g)
		}
		return slog.Group(a.Key, clean...)
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// errorKey reports whether an attribute of that key holds an error's text.
func errorKey(key string) bool {
	k := strings.ToLower(key)
	return k == "err" || strings.HasSuffix(k, "error") || strings.HasSuffix(k, "_err")
}
