package main

import (
	"context"
	"log/slog"

	scrub "github.com/idmint/idmint/internal/redact"
)

// redacting is a slog.Handler that takes connection details (user, database,
// host, port) out of the errors it logs: a log line never tells a reader
// where the database is or who idmint logs in as.
type redacting struct{ slog.Handler }

// Handle implements slog.Handler.
func (h redacting) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

// WithAttrs implements slog.Handler.
func (h redacting) WithAttrs(attrs []slog.Attr) slog.Handler {
	for i, a := range attrs {
		attrs[i] = redactAttr(a)
	}
	return redacting{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h redacting) WithGroup(name string) slog.Handler { return redacting{h.Handler.WithGroup(name)} }

func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch {
	case v.Kind() == slog.KindAny:
		if err, ok := v.Any().(error); ok && err != nil {
			return slog.String(a.Key, scrub.String(err.Error()))
		}
	case v.Kind() == slog.KindString && (a.Key == "err" || a.Key == "error"):
		return slog.String(a.Key, scrub.String(v.String()))
	}
	return a
}
