package memstore

import (
	"cmp"
	"context"
	"slices"
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
	mu       sync.Mutex // protects tags, requests, byLast, returned and tokens
	tags     map[string]*allocator.Tag
	requests map[uuid.UUID]allocator.Segment
	// byLast holds each tag's requests ordered by their last ID, as the
	// SQL stores' index (biz_tag, last_id): a give-back reads those that
	// end at or above its first ID (tailOf), not every request ever
	// granted.
	byLast map[string][]logEntry
	// returned holds where the give-back of a request's range started
	// (GiveBackRange, GiveBack), by request ID: the request keeps
	// [First, returned - 1], as the returned_from column of postgres.
	returned map[uuid.UUID]int64
	// tokens holds the bearer tokens (token.Store).
	tokens []token.Token
}

// New returns an empty Store.
func New() *Store {
	return &Store{tags: map[string]*allocator.Tag{}, requests: map[uuid.UUID]allocator.Segment{}, byLast: map[string][]logEntry{}}
}

// logEntry is one request in byLast.
type logEntry struct {
	last int64
	id   uuid.UUID
}

// logLocked records seg, just granted, in byLast. Grants end above the
// ones before them but after a restore (SetMaxID), so it is nearly always
// an append.
func (m *Store) logLocked(seg allocator.Segment) {
	log := m.byLast[seg.Tag]
	i := len(log)
	for i > 0 && log[i-1].last > seg.Last {
		i--
	}
	m.byLast[seg.Tag] = slices.Insert(log, i, logEntry{last: seg.Last, id: seg.RequestID})
}

// tailOf returns tag's requests that end at or above first: the only ones
// that can keep an ID at or above first.
func (m *Store) tailOf(tag string, first int64) []logEntry {
	log := m.byLast[tag]
	i, _ := slices.BinarySearchFunc(log, first, func(e logEntry, first int64) int { return cmp.Compare(e.last, first) })
	return log[i:]
}

// Ping implements allocator.Store.
func (m *Store) Ping(ctx context.Context) error { return ctx.Err() }
