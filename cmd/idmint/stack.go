package main

import (
	"context"
	"log/slog"
)

// stack holds what serve started, to stop it in reverse order: each part
// is pushed once it started, and close stops them all, last first, so that
// whatever the error path, a part is stopped before the parts it uses (the
// lease and the allocator's give-back before the store, the store before
// the listener).
type stack struct {
	parts []stackPart
}

type stackPart struct {
	name  string
	close func(ctx context.Context) error
}

// push adds a started part and how to stop it.
func (s *stack) push(name string, close func(ctx context.Context) error) {
	s.parts = append(s.parts, stackPart{name, close})
}

// close stops every part, last pushed first, each bounded by ctx. A part
// that fails to stop is logged and the others are still stopped.
func (s *stack) close(ctx context.Context, logger *slog.Logger) {
	for i := len(s.parts) - 1; i >= 0; i-- {
		p := s.parts[i]
		if err := p.close(ctx); err != nil {
			logger.Warn("stop "+p.name, "err", err)
		}
	}
	s.parts = nil
}
