package migrations_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator/sqlite"
	"github.com/idmint/idmint/migrations"
)

// TestUp_SQLiteStaleLock: a process killed while migrating leaves its lock
// row behind; once its lease has expired the next Up takes the lock over.
func TestUp_SQLiteStaleLock(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "idmint.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	db := store.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE idmint_migration_lock (id INTEGER PRIMARY KEY CHECK (id = 1), owner TEXT NOT NULL, expires_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	expired := time.Now().Add(-time.Second).UnixMilli()
	if _, err := db.ExecContext(ctx, `INSERT INTO idmint_migration_lock VALUES (1, 'killed', ?)`, expired); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	applied, err := migrations.Up(ctx, db, migrations.SQLite, nil)
	if err != nil || len(applied) == 0 {
		t.Fatalf("Up = %v, %v", applied, err)
	}
	var rows int
	db.QueryRowContext(ctx, `SELECT count(*) FROM idmint_migration_lock`).Scan(&rows)
	if rows != 0 {
		t.Fatalf("%d lock rows left after Up", rows)
	}
}

func TestFiles(t *testing.T) {
	for _, d := range []migrations.Dialect{migrations.PostgreSQL, migrations.SQLite} {
		fsys, err := migrations.Files(d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fsys.Open("00001_init.sql"); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	if _, err := migrations.Files("mysql"); err == nil {
		t.Error("unknown dialect accepted")
	}
}
