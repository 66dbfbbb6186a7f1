package lease_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/idmint/idmint/allocator/sqlite"
	"github.com/idmint/idmint/lease"
	"github.com/idmint/idmint/migrations"
	"github.com/idmint/idmint/snowflake"
)

// TestSQLite_FailedCommitIsAmbiguous makes each write's COMMIT fail (a
// trigger leaves a deferred foreign key broken, which SQLite only checks at
// COMMIT) and wants ErrOutcomeUnknown: a COMMIT that failed may still be on
// disk, so the caller may not read it as "nothing happened".
func TestSQLite_FailedCommitIsAmbiguous(t *testing.T) {
	ctx := ctxT(t)
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "idmint.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := migrations.Up(ctx, db.DB(), migrations.SQLite, nil); err != nil {
		t.Fatal(err)
	}
	s := lease.NewSQLite(db.DB())
	if err := s.Prepare(ctx, smallLayout()); err != nil {
		t.Fatal(err)
	}
	held, err := s.Acquire(ctx, longRequest("a", smallLayout().MaxWorker()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.DB().ExecContext(ctx, `
CREATE TABLE broken_parent (id INTEGER PRIMARY KEY);
CREATE TABLE broken_child (parent INTEGER REFERENCES broken_parent (id) DEFERRABLE INITIALLY DEFERRED);
CREATE TRIGGER break_commit AFTER UPDATE ON idmint_snowflake_workers
BEGIN INSERT INTO broken_child VALUES (42); END`); err != nil {
		t.Fatal(err)
	}
	writes := []struct {
		name  string
		write func(context.Context) error
	}{
		{"acquire", func(ctx context.Context) error {
			_, err := s.Acquire(ctx, longRequest("b", smallLayout().MaxWorker()))
			return err
		}},
		{"renew", func(ctx context.Context) error {
			_, err := s.Renew(ctx, held, longTTL, longRequest("a", 0).Margin)
			return err
		}},
		{"release", func(ctx context.Context) error { return s.Release(ctx, held, 0) }},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			err := w.write(ctx)
			if !errors.Is(err, lease.ErrOutcomeUnknown) {
				t.Fatalf("%s with a failing COMMIT: %v, want lease.ErrOutcomeUnknown", w.name, err)
			}
			if errors.Is(err, snowflake.ErrLeaseLost) || errors.Is(err, snowflake.ErrAllHeld) {
				t.Fatalf("%s with a failing COMMIT: %v, classified as a definite outcome", w.name, err)
			}
		})
	}
}
