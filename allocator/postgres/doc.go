// Package postgres is the production allocator.Store, on PostgreSQL: one row
// per tag in idmint_tags holds the high-water mark, and idmint_segments logs
// every grant by request ID. Each grant is one statement that bumps max_id
// and logs the request; a grant is served only once the standbys a
// ReplicationConfig requires have its WAL.
//
//	store, err := postgres.Open(ctx, "postgres://idmint@db/idmint")
//	defer store.Close()
//	a := allocator.New(allocator.Config{Store: store})
//
// Files by concern: postgres.go (the Store, its pool, Ping, Prune),
// grant.go (Allocate, Lookup, and how errors are classified), giveback.go
// (GiveBack, GiveBackRange), tags.go (allocator.Admin), tokens.go
// (token.Store), replication.go and standbys.go (which standbys must have a
// grant before it is served).
//
// Give back is the one verb for returning IDs: GiveBack takes an instance's
// segment tail back, GiveBackRange a caller's range tail, holder-checked;
// both record it in the segment log (returned_from) in the same step.
package postgres
