package migrations

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/idmint/idmint/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestDownAndUp: every migration's Down undoes its Up, in both dialects, so
// that an operator rolling back a release can step the schema back down and
// up again; a Down that fails (a column SQLite cannot drop, a table dropped
// twice) is found here, not during an incident.
func TestDownAndUp(t *testing.T) {
	ctx := context.Background()
	dbs := map[Dialect]func(t *testing.T) *sql.DB{
		SQLite: func(t *testing.T) *sql.DB {
			db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "idmint.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		},
		PostgreSQL: func(t *testing.T) *sql.DB {
			pool, err := pgxpool.New(ctx, pgtest.Shared(t).NewDatabase(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			db := stdlib.OpenDBFromPool(pool)
			t.Cleanup(func() { db.Close() })
			return db
		},
	}
	for d, open := range dbs {
		t.Run(string(d), func(t *testing.T) {
			db := open(t)
			if _, err := Up(ctx, db, d, nil); err != nil {
				t.Fatal(err)
			}
			p, err := provider(db, d)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.DownTo(ctx, 0); err != nil {
				t.Fatalf("down to 0: %v", err)
			}
			if v, err := p.GetDBVersion(ctx); err != nil || v != 0 {
				t.Fatalf("version after down: %d, %v", v, err)
			}
			applied, err := Up(ctx, db, d, nil)
			if err != nil {
				t.Fatalf("up again: %v", err)
			}
			if cur, latest, err := Version(ctx, db, d); err != nil || cur != latest || int64(len(applied)) != latest {
				t.Fatalf("after up again: version %d of %d, %d applied, %v", cur, latest, len(applied), err)
			}
		})
	}
}
