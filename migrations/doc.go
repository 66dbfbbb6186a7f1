// Package migrations holds idmint's database schema as goose SQL files,
// embedded in the binary, and applies them with goose's Provider API.
//
//	if err := migrations.Up(ctx, db); err != nil { ... }
//
// Several instances may run Up at once: a PostgreSQL advisory lock lets one
// apply the files while the others wait.
package migrations
