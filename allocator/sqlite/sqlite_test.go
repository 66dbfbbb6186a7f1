package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/sqlite"
	"github.com/idmint/idmint/migrations"
	"github.com/idmint/idmint/testkit/storetest"
)

// openSQLite opens the SQLite file at path, migrated; it is closed on cleanup.
func openSQLite(tb testing.TB, path string) *sqlite.Store {
	tb.Helper()
	store, err := sqlite.Open(context.Background(), path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { store.Close() })
	if _, err := migrations.Up(context.Background(), store.DB(), migrations.SQLite, nil); err != nil {
		tb.Fatal(err)
	}
	return store
}

func tempDB(tb testing.TB) string { return filepath.Join(tb.TempDir(), "idmint.db") }

func TestSQLite_Contract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store { return restorable{openSQLite(t, tempDB(t)), t} })
}

// restorable gives a SQLite store the contract's MaxIDSetter.
type restorable struct {
	*sqlite.Store
	tb testing.TB
}

func (r restorable) SetMaxID(name string, maxID int64) {
	if _, err := r.DB().Exec(`UPDATE idmint_tags SET max_id = ? WHERE biz_tag = ?`, maxID, name); err != nil {
		r.tb.Fatal(err)
	}
}

func TestSQLite_Migrations(t *testing.T) {
	path := tempDB(t)
	ctx := context.Background()

	// Several processes starting at once on a new file, each with its own
	// handle: the lock lets one apply.
	var wg sync.WaitGroup
	applied := make([][]int64, 3)
	for i := range applied {
		store, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		wg.Go(func() {
			var err error
			if applied[i], err = migrations.Up(ctx, store.DB(), migrations.SQLite, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	store := openSQLite(t, path)
	total := 0
	for _, a := range applied {
		total += len(a)
	}
	current, latest, err := migrations.Version(ctx, store.DB(), migrations.SQLite)
	if err != nil || current != latest || latest < 1 || total != storetest.MigrationFiles(t, migrations.SQLite) {
		t.Fatalf("version %d/%d, applied %v, err %v", current, latest, applied, err)
	}

	t.Run("the connection settings hold", func(t *testing.T) {
		for pragma, want := range map[string]string{"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "busy_timeout": "10000"} {
			var got string
			if err := store.DB().QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil || got != want {
				t.Errorf("PRAGMA %s = %q, %v; want %q", pragma, got, err, want)
			}
		}
	})

	t.Run("constraints reject bad rows", func(t *testing.T) {
		for _, sql := range []string{
			`INSERT INTO idmint_tags (biz_tag) VALUES ('bad tag')`,
			`INSERT INTO idmint_tags (biz_tag) VALUES ('-dash')`,
			`INSERT INTO idmint_tags (biz_tag) VALUES ('')`,
			`INSERT INTO idmint_tags (biz_tag) VALUES ('ö')`,
			`INSERT INTO idmint_tags (biz_tag) VALUES ('` + strings.Repeat("a", 65) + `')`,
			`INSERT INTO idmint_tags (biz_tag, step) VALUES ('a', 0)`,
			`INSERT INTO idmint_tags (biz_tag, step, max_step) VALUES ('a', 100, 10)`,
			`INSERT INTO idmint_tags (biz_tag, max_id) VALUES ('a', -1)`,
			`INSERT INTO idmint_tags (biz_tag, max_id) VALUES ('a', 1.5)`,
			`INSERT INTO idmint_segments (request_id, biz_tag, first_id, last_id) VALUES ('0190a0a0-0000-7000-8000-000000000000', 'nope', 1, 10)`,
		} {
			// Refused by a constraint or the column's type, not for any
			// other reason such as a missing table.
			_, err := store.DB().ExecContext(ctx, sql)
			if err == nil || !(strings.Contains(err.Error(), "constraint failed") || strings.Contains(err.Error(), "cannot store")) {
				t.Errorf("%s: %v, want a constraint violation", sql, err)
			}
		}
	})

	t.Run("the schema accepts every valid tag name", func(t *testing.T) {
		for _, name := range []string{"a", "Z9", "order.v2:eu-west_1", strings.Repeat("x", 64)} {
			if err := allocator.ValidateTag(name); err != nil {
				t.Fatal(err)
			}
			if _, err := store.DB().ExecContext(ctx, `INSERT INTO idmint_tags (biz_tag) VALUES (?)`, name); err != nil {
				t.Errorf("refused %q: %v", name, err)
			}
		}
	})
}

// TestSQLite_Reopen checks that grants survive closing the file: the next
// process starts above them.
func TestSQLite_Reopen(t *testing.T) {
	path := tempDB(t)
	ctx := context.Background()
	store := openSQLite(t, path)
	if _, err := store.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 10}); err != nil {
		t.Fatal(err)
	}
	first, err := store.Allocate(ctx, storetest.NewRequest("order", 0))
	if err != nil {
		t.Fatal(err)
	}
	store.Close()

	again := openSQLite(t, path)
	seg, err := again.Allocate(ctx, storetest.NewRequest("order", 0))
	if err != nil || seg.First != first.Last+1 {
		t.Fatalf("after reopen: %+v, %v; want a segment from %d", seg, err, first.Last+1)
	}
	if got, err := again.Lookup(ctx, first.RequestID); err != nil || got != first {
		t.Fatalf("Lookup after reopen = %+v, %v; want %+v", got, err, first)
	}
}

func TestSQLite_Prune(t *testing.T) {
	store := openSQLite(t, tempDB(t))
	ctx := context.Background()
	if _, err := store.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 10}); err != nil {
		t.Fatal(err)
	}
	old, err := store.Allocate(ctx, storetest.NewRequest("order", 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB().ExecContext(ctx, `UPDATE idmint_segments SET granted_at = '2001-01-01T00:00:00.000Z'`); err != nil {
		t.Fatal(err)
	}
	recent, err := store.Allocate(ctx, storetest.NewRequest("order", 0))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := store.Prune(ctx, time.Hour); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1 row", n, err)
	}
	if _, err := store.Lookup(ctx, old.RequestID); err == nil {
		t.Error("the old row survived")
	}
	if _, err := store.Lookup(ctx, recent.RequestID); err != nil {
		t.Errorf("the recent row was pruned: %v", err)
	}
}

// TestSQLite_Uniqueness runs several allocators, each with its own handle on
// one file as separate processes would have, with a tiny fixed step: zero
// duplicates, every goroutine's IDs increasing.
func TestSQLite_Uniqueness(t *testing.T) {
	const instances, goroutines, perGoroutine = 3, 8, 1000 // 24,000 IDs
	path := tempDB(t)
	store := openSQLite(t, path)
	if _, err := store.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10}); err != nil {
		t.Fatal(err)
	}
	allocators := make([]*allocator.Allocator, instances)
	for i := range allocators {
		allocators[i] = storetest.NewAllocator(t, openSQLite(t, path), func(c *allocator.Config) {
			c.Instance = fmt.Sprint("instance-", i)
			// SQLite does not queue waiters for its write lock: under a
			// saturating load one process may wait seconds for it.
			c.Segment.WaitTimeout, c.Segment.LoadTimeout = time.Minute, time.Minute
		})
	}
	n := storetest.Hammer(t, allocators, "order", goroutines, perGoroutine)
	tags, err := store.Tags(context.Background())
	if err != nil || len(tags) != 1 {
		t.Fatalf("Tags = %+v, %v", tags, err)
	}
	t.Logf("%d ids from %d handles x %d goroutines on one file, max_id %d: 0 duplicates", n, instances, goroutines, tags[0].MaxID)
}

// TestSQLite_AuditGiveBacks: the segment log explains every ID once
// give-backs are accounted.
func TestSQLite_AuditGiveBacks(t *testing.T) {
	store := openSQLite(t, tempDB(t))
	storetest.Audit(t, store, func(sql string, one bool) int64 {
		rows, err := store.DB().Query(sql)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var n int64
		for rows.Next() {
			if one {
				if err := rows.Scan(&n); err != nil {
					t.Fatal(err)
				}
				continue
			}
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return n
	})
}

// TestSQLite_RollbackRepaired: the file goes back in time under a running
// instance (max_id halved, as a restored copy would be). Its next fetch
// raises max_id to the highest ID it was granted and it serves on; an
// instance started after, with its own handle, repeats no ID.
func TestSQLite_RollbackRepaired(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	store := openSQLite(t, path)
	if _, err := store.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10}); err != nil {
		t.Fatal(err)
	}
	running := storetest.NewAllocator(t, store, nil)
	ids, err := running.NextN(ctx, "order", 95)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB().Exec(`UPDATE idmint_tags SET max_id = max_id / 2 WHERE biz_tag = 'order'`); err != nil {
		t.Fatal(err)
	}
	more, err := running.NextN(ctx, "order", 50)
	if err != nil {
		t.Fatalf("after the rollback: %v", err)
	}
	ids = append(ids, more...)
	if st := running.Stats()[0]; st.Repaired != 1 || st.Refused != 0 {
		t.Fatalf("repaired %d, refused %d; want 1 and 0", st.Repaired, st.Refused)
	}
	late := storetest.NewAllocator(t, openSQLite(t, path), nil)
	for range 100 {
		for _, a := range []*allocator.Allocator{running, late} {
			id, err := a.Next(ctx, "order")
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	seen := map[int64]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("id %d handed out twice", id)
		}
		seen[id] = true
	}
}
