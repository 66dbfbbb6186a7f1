// Package sqlite is an allocator.Store in one SQLite file, for the idmint
// processes of a single machine, with the guarantees of the postgres store:
// each grant bumps max_id and logs the request in one transaction that takes
// the write lock up front, and commits with synchronous=FULL.
//
//	store, err := sqlite.Open(ctx, "/var/lib/idmint/idmint.db")
//	_, err = migrations.Up(ctx, store.DB(), migrations.SQLite, nil)
//	a := allocator.New(allocator.Config{Store: store})
//
// Files by concern: sqlite.go (the Store, its write transactions, Ping,
// Prune), grant.go (Allocate, Lookup), giveback.go (GiveBack,
// GiveBackRange), tags.go (allocator.Admin), tokens.go (token.Store).
//
// Give back is the one verb for returning IDs: GiveBack takes an instance's
// segment tail back, GiveBackRange a caller's range tail, holder-checked;
// both record it in the segment log (returned_from) in the same transaction.
package sqlite
