package sqlitetx_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/idmint/idmint/internal/sqlitetx"
	_ "modernc.org/sqlite"
)

var errAmbiguous = errors.New("outcome unknown")

// open returns a fresh SQLite file with foreign keys on and a child table
// whose deferred foreign key is only checked at COMMIT: inserting an orphan
// makes the COMMIT itself fail.
func open(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := sql.Open("sqlite", filepath.Join(tb.TempDir(), "tx.db")+"?_pragma=foreign_keys(1)&_txlock=immediate")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE parent (id INTEGER PRIMARY KEY);
CREATE TABLE child (parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		tb.Fatal(err)
	}
	return db
}

func TestWrite(t *testing.T) {
	errFn := errors.New("fn failed")
	tests := []struct {
		name      string
		stmt      string
		fnErr     error
		ambiguous bool
		rows      int
	}{
		{name: "committed", stmt: `INSERT INTO parent VALUES (1)`, rows: 1},
		{name: "fn error rolls back, not ambiguous", stmt: `INSERT INTO parent VALUES (1)`, fnErr: errFn},
		{name: "failed commit is ambiguous", stmt: `INSERT INTO child VALUES (42)`, ambiguous: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			db := open(t)
			err := sqlitetx.Write(ctx, db, errAmbiguous, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, tt.stmt); err != nil {
					return err
				}
				return tt.fnErr
			})
			if got := errors.Is(err, errAmbiguous); got != tt.ambiguous {
				t.Fatalf("Write: %v; ambiguous %v, want %v", err, got, tt.ambiguous)
			}
			if tt.fnErr != nil && !errors.Is(err, tt.fnErr) {
				t.Fatalf("Write: %v, want fn's error", err)
			}
			if tt.fnErr == nil && !tt.ambiguous && err != nil {
				t.Fatalf("Write: %v", err)
			}
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM parent`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != tt.rows {
				t.Fatalf("%d parent rows after Write, want %d", n, tt.rows)
			}
		})
	}
}
