package memstore

import (
	"context"
	"sync"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/token"
)

var _ allocator.Store = (*Store)(nil)

// Store is an allocator.Store in memory, with the same semantics as the
// postgres store. IDs are unique only for as long as the Store lives: use
// it in tests, or in a program that needs IDs unique within one process.
type Store struct {
	mu       sync.Mutex // protects tags, requests, returned and tokens
	tags     map[string]*allocator.Tag
	requests map[uuid.UUID]allocator.Segment
	// returned holds where the give-back of a request's range started
	// (GiveBackRange, GiveBack), by request ID: the request keeps
	// [First, returned - 1], as the returned_from column of postgres.
	returned map[uuid.UUID]int64
	// tokens holds the bearer tokens (token.Store).
	tokens []token.Token
}

// New returns an empty Store.
func New() *Store {
	return &Store{tags: map[string]*allocator.Tag{}, requests: map[uuid.UUID]allocator.Segment{}}
}

// Ping implements allocator.Store.
func (m *Store) Ping(ctx context.Context) error { return ctx.Err() }
