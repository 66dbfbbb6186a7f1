package main

import (
	"log/slog"

	scrub "github.com/idmint/idmint/internal/redact"
)

// redacting wraps the handler of every command's logger so that a log line
// never tells a reader where the database is or who idmint logs in as: the
// same redactor as the HTTP surfaces (internal/redact).
func redacting(h slog.Handler) slog.Handler { return scrub.NewHandler(h) }
