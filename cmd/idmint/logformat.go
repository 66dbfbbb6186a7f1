package main

import "log/slog"

// durationText makes a duration attribute read the same in JSON as in text:
// a Go duration string ("825.16µs", "1.5s"), which time.ParseDuration reads
// back, rather than slog's JSON default of bare nanoseconds, which neither a
// reader nor a log query can tell from a count. It is the ReplaceAttr of
// every command's handler, so it applies in groups and With attributes too.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
