package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/migrations"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func createTag(tb testing.TB, store *postgres.Store, spec allocator.TagSpec) {
	tb.Helper()
	if _, err := store.CreateTag(context.Background(), spec); err != nil {
		tb.Fatal(err)
	}
}

func maxID(tb testing.TB, store *postgres.Store, tag string) int64 {
	tb.Helper()
	var n int64
	if err := store.Pool().QueryRow(context.Background(), `SELECT max_id FROM idmint_tags WHERE biz_tag = $1`, tag).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

func TestMigrations(t *testing.T) {
	url := pgtest.Shared(t).NewDatabase(t)
	ctx := context.Background()
	store, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	db := stdlib.OpenDBFromPool(store.Pool())
	defer db.Close()

	// Several instances starting at once: the lock lets one apply.
	var wg sync.WaitGroup
	applied := make([][]int64, 3)
	for i := range applied {
		wg.Go(func() {
			var err error
			if applied[i], err = migrations.Up(ctx, db, migrations.PostgreSQL, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	total := 0
	for _, a := range applied {
		total += len(a)
	}
	current, latest, err := migrations.Version(ctx, db, migrations.PostgreSQL)
	if err != nil || current != latest || latest < 1 || total != storetest.MigrationFiles(t, migrations.PostgreSQL) {
		t.Fatalf("version %d/%d, applied %v, err %v", current, latest, applied, err)
	}

	t.Run("constraints reject bad rows", func(t *testing.T) {
		for _, sql := range []string{
			`INSERT INTO idmint_tags (biz_tag) VALUES ('bad tag')`,
			`INSERT INTO idmint_tags (biz_tag, step) VALUES ('a', 0)`,
			`INSERT INTO idmint_tags (biz_tag, step, max_step) VALUES ('a', 100, 10)`,
			`INSERT INTO idmint_tags (biz_tag, max_id) VALUES ('a', -1)`,
		} {
			// Refused by a constraint (SQLSTATE class 23), not for any
			// other reason such as a missing table.
			_, err := store.Pool().Exec(ctx, sql)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || !strings.HasPrefix(pgErr.Code, "23") {
				t.Errorf("%s: %v, want a constraint violation", sql, err)
			}
		}
	})
}

// TestPostgres_Contract runs the Store contract on real PostgreSQL, a fresh
// database per subtest.
func TestPostgres_Contract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store {
		store, _ := pgstore.New(t)
		return restorablePG{store, t}
	})
}

// restorablePG gives a Postgres store the contract's MaxIDSetter.
type restorablePG struct {
	*postgres.Store
	tb testing.TB
}

func (r restorablePG) SetMaxID(name string, maxID int64) {
	if _, err := r.Pool().Exec(context.Background(), `UPDATE idmint_tags SET max_id = $1 WHERE biz_tag = $2`, maxID, name); err != nil {
		r.tb.Fatal(err)
	}
}

// TestPostgres_RetryWhileInFlight holds the tag's row lock so the original
// allocation hangs, sends a retry with the same request ID, then releases
// the lock: exactly one range is granted for the request.
func TestPostgres_RetryWhileInFlight(t *testing.T) {
	store, _ := pgstore.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createTag(t, store, allocator.TagSpec{Name: "order", Step: 10})

	locker, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A failing test releases the lock before the store's cleanup.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = locker.Rollback(ctx) // after the test's own rollback: ErrTxClosed
	})
	if _, err := locker.Exec(ctx, `SELECT 1 FROM idmint_tags WHERE biz_tag = 'order' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	req := storetest.NewRequest("order", 0)
	type result struct {
		seg allocator.Segment
		err error
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			seg, err := store.Allocate(ctx, req)
			results <- result{seg, err}
		}()
	}
	// Both statements are queued on the lock: two sessions of this
	// database wait on a lock.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := store.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait on the row lock after 30s, want 2", waiting)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var granted, already int
	for range 2 {
		var r result
		select {
		case r = <-results:
		case <-ctx.Done():
			t.Fatal("an allocation did not return after the lock was released")
		}
		switch {
		case r.err == nil:
			granted++
		case errors.Is(r.err, allocator.ErrAlreadyGranted):
			already++
		default:
			t.Fatalf("unexpected error: %v", r.err)
		}
	}
	if granted != 1 || already != 1 {
		t.Fatalf("granted %d, already granted %d; want 1 and 1", granted, already)
	}
	var rows int
	if err := store.Pool().QueryRow(ctx, `SELECT count(*) FROM idmint_segments WHERE request_id = $1`, req.ID).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if got := maxID(t, store, "order"); got != 10 || rows != 1 {
		t.Fatalf("max_id %d, %d log rows; want 10 and 1", got, rows)
	}
}

// TestPostgres_Uniqueness runs many allocators against one database with a
// tiny fixed step, so that ranges switch constantly: zero duplicates, and
// every goroutine's IDs strictly increasing.
func TestPostgres_Uniqueness(t *testing.T) {
	const instances, goroutines, perGoroutine = 4, 16, 3200 // 204,800 IDs
	store, url := pgstore.New(t)
	createTag(t, store, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10})

	allocators := make([]*allocator.Allocator, instances)
	for i := range allocators {
		// Each instance has its own pool, as separate processes would.
		allocators[i] = storetest.NewAllocator(t, pgstore.Open(t, url), func(c *allocator.Config) { c.Instance = fmt.Sprint("instance-", i) })
	}
	n := storetest.Hammer(t, allocators, "order", goroutines, perGoroutine)
	var segments int64
	if err := store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM idmint_segments`).Scan(&segments); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d ids from %d instances x %d goroutines, %d segments of 10, max_id %d: 0 duplicates",
		n, instances, goroutines, segments, maxID(t, store, "order"))
}

// TestNewPostgres_SynchronousCommit: a pool whose sessions run with
// synchronous_commit=off (a role, database or pool setting) must still
// commit every grant synchronously. A trigger records the setting inside
// the allocation's own transaction.
func TestNewPostgres_SynchronousCommit(t *testing.T) {
	ctx := context.Background()
	_, url := pgstore.New(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	store := postgres.New(pool)
	defer store.Close()
	if _, err := pool.Exec(ctx, `
CREATE TABLE seen_synchronous_commit (setting text NOT NULL);
CREATE FUNCTION record_synchronous_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO seen_synchronous_commit VALUES (current_setting('synchronous_commit'));
    RETURN NEW;
END $$;
CREATE TRIGGER record_synchronous_commit AFTER INSERT ON idmint_segments
    FOR EACH ROW EXECUTE FUNCTION record_synchronous_commit();`); err != nil {
		t.Fatal(err)
	}
	createTag(t, store, allocator.TagSpec{Name: "order", Step: 10})
	if _, err := store.Allocate(ctx, storetest.NewRequest("order", 0)); err != nil {
		t.Fatal(err)
	}
	var inside, session string
	if err := pool.QueryRow(ctx, `SELECT setting FROM seen_synchronous_commit`).Scan(&inside); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&session); err != nil {
		t.Fatal(err)
	}
	if inside != "on" || session != "off" {
		t.Fatalf("synchronous_commit: %q in the allocation, %q in the session; want on, off", inside, session)
	}
}

// TestPostgres_AuditGiveBacks: the segment log explains every ID once
// give-backs are accounted.
func TestPostgres_AuditGiveBacks(t *testing.T) {
	store, _ := pgstore.New(t)
	storetest.Audit(t, store, func(sql string, one bool) int64 {
		rows, err := store.Pool().Query(context.Background(), sql)
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
