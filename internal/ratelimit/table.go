package ratelimit

import (
	"hash/maphash"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// probes is how many of a full shard's least recently used keys a new key
// looks at for an idle one to replace: a constant, so that a full table of
// busy keys costs a new key as much as an empty one.
const probes = 4

// shardSize is about how many keys one shard holds (at most 16 shards):
// small tables keep one shard, an exact LRU.
const shardSize = 256

// Table is a bounded set of token buckets of type L by key: *rate.Limiter
// (New) or *Bucket (NewBuckets). It is safe for concurrent use.
type Table[K comparable, L any] struct {
	newLimiter func() L
	full       func(L, time.Time) bool // the bucket is full at a time: idle
	burst      int
	seed       maphash.Seed
	shards     []*shard[K, L]
}

// shard is one lock's share of the keys, in least recently used order.
type shard[K comparable, L any] struct {
	max int

	mu    sync.Mutex // protects the fields below
	byKey map[K]*entry[K, L]
	// lru is the sentinel of a ring of the entries: lru.next is the most
	// recently used, lru.prev the least.
	lru entry[K, L]
	// overflow is shared by new keys when the shard is full of busy ones.
	overflow L
}

type entry[K comparable, L any] struct {
	key        K
	limiter    L
	prev, next *entry[K, L]
}

// New returns a table of buckets that refill at perSecond up to burst, for
// at most about capacity keys (rounded up to a multiple of the shards:
// capacity plus at most 15). The table's memory is bounded by that
// capacity, about 200 bytes a key.
func New[K comparable](perSecond float64, burst, capacity int) *Table[K, *rate.Limiter] {
	return newTable[K](burst, capacity, func() *rate.Limiter { return rate.NewLimiter(rate.Limit(perSecond), burst) },
		func(l *rate.Limiter, now time.Time) bool { return l.TokensAt(now) >= float64(burst) })
}

// NewBuckets is New with a *Bucket per key, for charges settled after the
// fact.
func NewBuckets[K comparable](perSecond float64, burst, capacity int) *Table[K, *Bucket] {
	return newTable[K](burst, capacity, func() *Bucket { return NewBucket(perSecond, int64(burst)) }, (*Bucket).Full)
}

func newTable[K comparable, L any](burst, capacity int, newLimiter func() L, full func(L, time.Time) bool) *Table[K, L] {
	capacity = max(capacity, 1)
	n := min(max(capacity/shardSize, 1), 16)
	t := &Table[K, L]{newLimiter: newLimiter, full: full, burst: burst, seed: maphash.MakeSeed(), shards: make([]*shard[K, L], n)}
	for i := range t.shards {
		s := &shard[K, L]{max: (capacity + n - 1) / n, byKey: map[K]*entry[K, L]{}, overflow: t.newLimiter()}
		s.lru.next, s.lru.prev = &s.lru, &s.lru
		t.shards[i] = s
	}
	return t
}

// Burst is the burst of every bucket.
func (t *Table[K, L]) Burst() int { return t.burst }

// Get returns key's bucket, making it (full) if key has none. When key's
// shard is full and none of its least recently used keys is idle at now,
// it returns the shard's overflow bucket, shared by such new keys.
//
// A bucket dropped while a request still holds it takes that request's
// charge with it. That needs a key idle when dropped, hence charged by
// nobody in flight, so at most one request of a key whose shard admitted
// a whole shard of new keys between its Get and its charge.
func (t *Table[K, L]) Get(key K, now time.Time) L {
	s := t.shards[0]
	if len(t.shards) > 1 {
		s = t.shards[maphash.Comparable(t.seed, key)%uint64(len(t.shards))]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byKey[key]; e != nil {
		s.toFrontLocked(e)
		return e.limiter
	}
	if len(s.byKey) < s.max {
		e := &entry[K, L]{key: key, limiter: t.newLimiter()}
		s.byKey[key] = e
		s.toFrontLocked(e)
		return e.limiter
	}
	for range probes {
		e := s.lru.prev
		s.toFrontLocked(e) // replaced, or a second chance: busy now
		if !t.full(e.limiter, now) {
			continue
		}
		// Idle: its bucket is full, as a new one would be. Dropping it
		// loses nothing, and the entry is the new key's.
		delete(s.byKey, e.key)
		e.key, e.limiter = key, t.newLimiter()
		s.byKey[key] = e
		return e.limiter
	}
	return s.overflow
}

// Len returns how many keys have a bucket of their own.
func (t *Table[K, L]) Len() int {
	n := 0
	for _, s := range t.shards {
		s.mu.Lock()
		n += len(s.byKey)
		s.mu.Unlock()
	}
	return n
}

// toFrontLocked makes e the most recently used entry, linking it in if it
// is not yet.
func (s *shard[K, L]) toFrontLocked(e *entry[K, L]) {
	if e.prev != nil {
		e.prev.next, e.next.prev = e.next, e.prev
	}
	e.prev, e.next = &s.lru, s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}
