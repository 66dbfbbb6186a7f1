// Package migrations holds idmint's database schema as goose SQL files,
// embedded in the binary, one set per dialect (PostgreSQL, SQLite), and
// applies them with goose's Provider API.
//
//	applied, err := migrations.Up(ctx, db, migrations.PostgreSQL, logger)
//
// Several instances may run Up at once: a lock lets one apply the files
// while the others wait (a PostgreSQL advisory lock; for SQLite, a lease row
// in the database file, since goose has no SQLite locker).
package migrations
