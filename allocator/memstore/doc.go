// Package memstore is an allocator.Store in memory, with the semantics of
// the postgres store, for tests and for programs that need IDs unique
// within one process only.
//
//	store := memstore.New()
//	_, err := store.CreateTag(ctx, allocator.TagSpec{Name: "order"})
//	a := allocator.New(allocator.Config{Store: store})
//
// Files by concern: memstore.go (the Store), grant.go (Allocate, Lookup),
// giveback.go (GiveBack, GiveBackRange), tags.go (allocator.Admin, and
// SetMaxID for tests that turn the clock back), tokens.go (token.Store).
//
// Give back is the one verb for returning IDs: GiveBack takes an instance's
// segment tail back, GiveBackRange a caller's range tail, holder-checked.
package memstore
