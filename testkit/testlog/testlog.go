// Package testlog collects log output in tests: a Buffer is an io.Writer
// that many goroutines may write to (a slog handler's, a child process's)
// while the test reads it.
//
//	var logs testlog.Buffer
//	logger := slog.New(slog.NewJSONHandler(&logs, nil))
//	…
//	if !strings.Contains(logs.String(), "REFUSED") { … }
package testlog

import (
	"bytes"
	"log/slog"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use. The zero value is ready.
type Buffer struct {
	mu  sync.Mutex // protects buf
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Discard returns a logger that drops everything: the one tests pass where
// a logger is required and its output is not looked at.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
