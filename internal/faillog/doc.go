// Package faillog bounds what failures cost the log: the line a server
// writes for each request or call that failed on its side (Message) is
// written at most once a second per error code, and the next one says how
// many were dropped. A cluster whose worker IDs are all held answers
// thousands of 503s a second; each is still counted in the metrics.
//
//	logger := slog.New(faillog.New(handler, nil))
//	logger.Warn(faillog.Message, "code", "unavailable", "err", err)
package faillog
