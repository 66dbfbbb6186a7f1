// Package pgstore opens idmint's PostgreSQL store on a database of a
// testkit/pgtest server, migrated: the one copy of what the tests on
// PostgreSQL write first.
//
//	store, url := pgstore.New(t)    // a fresh, migrated database on pgtest.Shared
//	other := pgstore.Open(t, url)   // another pool on it, as another process has
//	pgstore.Migrate(t, r.URL(db))   // the schema on a database made elsewhere
package pgstore

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/migrations"
	"github.com/idmint/idmint/testkit/pgtest"
)

// Open connects a store to url with a pool of its own, closed when the
// test ends.
func Open(tb testing.TB, url string) *postgres.Store {
	tb.Helper()
	store, err := postgres.Open(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(store.Close)
	return store
}

// Migrate applies idmint's schema to the database at url.
func Migrate(tb testing.TB, url string) {
	tb.Helper()
	store, err := postgres.Open(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	defer store.Close()
	db := stdlib.OpenDBFromPool(store.Pool())
	defer db.Close()
	if _, err := migrations.Up(context.Background(), db, migrations.PostgreSQL, nil); err != nil {
		tb.Fatal(err)
	}
}

// NewDatabase returns the URL of a fresh, migrated database on srv.
func NewDatabase(tb testing.TB, srv *pgtest.Server) string {
	tb.Helper()
	url := srv.NewDatabase(tb)
	Migrate(tb, url)
	return url
}

// New returns a store on a fresh, migrated database of pgtest.Shared, and
// the database's URL.
func New(tb testing.TB) (*postgres.Store, string) {
	tb.Helper()
	url := NewDatabase(tb, pgtest.Shared(tb))
	return Open(tb, url), url
}
