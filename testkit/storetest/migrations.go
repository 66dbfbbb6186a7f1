package storetest

import (
	"io/fs"
	"testing"

	"github.com/idmint/idmint/migrations"
)

// MigrationFiles counts the migration files of d: a fresh database applies
// each once (version numbers may skip).
func MigrationFiles(tb testing.TB, d migrations.Dialect) int {
	tb.Helper()
	fsys, err := migrations.Files(d)
	if err != nil {
		tb.Fatal(err)
	}
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		tb.Fatal(err)
	}
	return len(files)
}
