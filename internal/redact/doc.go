// Package redact takes connection details out of error text before it leaves
// the process: the user idmint logs in as, its password, the database's
// name, host names and addresses. Every surface that shows an error (the
// /id/health document, API error replies, the dashboard that reads health,
// and the log handler of the idmint command) goes through it, so that what
// one surface hides another cannot show.
//
// Error knows the errors of pgx and the net package and takes out exactly
// the details they carry (a *pgconn.ConnectError's user, database, password
// and hosts, a *net.DNSError's name and server, a *net.OpError's
// addresses); String scrubs text by its shape (key=value pairs, URLs,
// addresses, "lookup NAME on SERVER", quoted role and database names in
// PostgreSQL's messages) and is the backstop for both. What the message
// says happened stays:
//
//	redact.String("failed to connect to `user=app database=orders`: 10.0.0.5:5432 (db.internal): dial error: dial tcp 10.0.0.5:5432: connect: connection refused")
//	// "failed to connect to `user=[redacted] database=[redacted]`: [redacted]: dial error: dial tcp [redacted]: connect: connection refused"
//
// NewHandler wraps a slog.Handler so that the errors in its records are
// redacted the same way.
package redact
