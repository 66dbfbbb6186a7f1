package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/pgtest"
	"github.com/idmint/idmint/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// openPostgres returns a store on a fresh, migrated database, and its URL.
func openPostgres(tb testing.TB) (*allocator.Postgres, string) {
	tb.Helper()
	url := pgtest.Shared(tb).NewDatabase(tb)
	store := connect(tb, url)
	db := stdlib.OpenDBFromPool(store.Pool())
	defer db.Close()
	if _, err := migrations.Up(context.Background(), db, nil); err != nil {
		tb.Fatal(err)
	}
	return store, url
}

func connect(tb testing.TB, url string) *allocator.Postgres {
	tb.Helper()
	store, err := allocator.OpenPostgres(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(store.Close)
	return store
}

func createTag(tb testing.TB, store *allocator.Postgres, spec allocator.TagSpec) {
	tb.Helper()
	if _, err := store.CreateTag(context.Background(), spec); err != nil {
		tb.Fatal(err)
	}
}

func maxID(tb testing.TB, store *allocator.Postgres, tag string) int64 {
	tb.Helper()
	var n int64
	if err := store.Pool().QueryRow(context.Background(), `SELECT max_id FROM idmint_tags WHERE biz_tag = $1`, tag).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

func newRequest(tag string, size int64) allocator.Request {
	return allocator.Request{ID: uuid.Must(uuid.NewV7()), Tag: tag, Size: size, Instance: "test"}
}

func TestMigrations(t *testing.T) {
	url := pgtest.Shared(t).NewDatabase(t)
	ctx := context.Background()
	store, err := allocator.OpenPostgres(ctx, url)
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
			if applied[i], err = migrations.Up(ctx, db, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	total := 0
	for _, a := range applied {
		total += len(a)
	}
	current, latest, err := migrations.Version(ctx, db)
	if err != nil || current != latest || latest < 1 || total != int(latest) {
		t.Fatalf("version %d/%d, applied %v, err %v", current, latest, applied, err)
	}

	t.Run("constraints reject bad rows", func(t *testing.T) {
		for _, sql := range []string{
			`INSERT INTO idmint_tags (biz_tag) VALUES ('bad tag')`,
			`INSERT INTO idmint_tags (biz_tag, step) VALUES ('a', 0)`,
			`INSERT INTO idmint_tags (biz_tag, step, max_step) VALUES ('a', 100, 10)`,
			`INSERT INTO idmint_tags (biz_tag, max_id) VALUES ('a', -1)`,
		} {
			if _, err := store.Pool().Exec(ctx, sql); err == nil {
				t.Errorf("accepted: %s", sql)
			}
		}
	})
}

func TestPostgres_Allocate(t *testing.T) {
	store, _ := openPostgres(t)
	ctx := context.Background()
	createTag(t, store, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 50})

	t.Run("ranges are consecutive and bounded by step and max_step", func(t *testing.T) {
		want := []struct{ size, first, last int64 }{
			{0, 1, 10},      // the tag's step
			{5, 11, 20},     // below step: step
			{30, 21, 50},    // within bounds
			{1000, 51, 100}, // above max_step: max_step
		}
		for _, w := range want {
			seg, err := store.Allocate(ctx, newRequest("order", w.size))
			if err != nil {
				t.Fatal(err)
			}
			if seg.First != w.first || seg.Last != w.last || seg.Step != 10 || seg.MaxStep != 50 {
				t.Fatalf("size %d: got %+v, want [%d, %d]", w.size, seg, w.first, w.last)
			}
		}
		if got := maxID(t, store, "order"); got != 100 {
			t.Fatalf("max_id = %d, want 100", got)
		}
	})

	t.Run("unknown tag", func(t *testing.T) {
		if _, err := store.Allocate(ctx, newRequest("nope", 0)); !errors.Is(err, allocator.ErrUnknownTag) {
			t.Fatalf("err = %v, want ErrUnknownTag", err)
		}
	})

	t.Run("overflow is refused, never wrapped", func(t *testing.T) {
		createTag(t, store, allocator.TagSpec{Name: "big", Step: 100, Start: math.MaxInt64 - 149})
		seg, err := store.Allocate(ctx, newRequest("big", 0))
		if err != nil || seg.Last != math.MaxInt64-50 {
			t.Fatalf("first: %+v, %v", seg, err)
		}
		before := maxID(t, store, "big")
		if _, err := store.Allocate(ctx, newRequest("big", 0)); !errors.Is(err, allocator.ErrExhausted) {
			t.Fatalf("err = %v, want ErrExhausted", err)
		}
		if after := maxID(t, store, "big"); after != before {
			t.Fatalf("max_id moved from %d to %d on a refused allocation", before, after)
		}
	})

	t.Run("a request ID is granted once", func(t *testing.T) {
		req := newRequest("order", 0)
		first, err := store.Allocate(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		before := maxID(t, store, "order")
		if _, err := store.Allocate(ctx, req); !errors.Is(err, allocator.ErrAlreadyGranted) {
			t.Fatalf("retry err = %v, want ErrAlreadyGranted", err)
		}
		if after := maxID(t, store, "order"); after != before {
			t.Fatalf("retry moved max_id from %d to %d", before, after)
		}
		got, err := store.Lookup(ctx, req.ID)
		if err != nil || got.First != first.First || got.Last != first.Last || got.Tag != "order" {
			t.Fatalf("Lookup = %+v, %v; want %+v", got, err, first)
		}
		if _, err := store.Lookup(ctx, uuid.Must(uuid.NewV7())); !errors.Is(err, allocator.ErrNotFound) {
			t.Fatalf("Lookup unknown: %v, want ErrNotFound", err)
		}
	})
}

// droppingStore commits allocations on the real database but drops the first
// n answers, as a connection lost after COMMIT would.
type droppingStore struct {
	*allocator.Postgres
	mu      sync.Mutex
	drop    int
	dropped []uuid.UUID
}

func (s *droppingStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	seg, err := s.Postgres.Allocate(ctx, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && len(s.dropped) < s.drop {
		s.dropped = append(s.dropped, req.ID)
		return allocator.Segment{}, fmt.Errorf("%w: reply dropped by the test", allocator.ErrAmbiguous)
	}
	return seg, err
}

// TestPostgres_LostReply grants a segment, drops the answer, and checks that
// the allocator's retry with the same request ID gets the same range and
// that max_id moved once per request.
func TestPostgres_LostReply(t *testing.T) {
	store, _ := openPostgres(t)
	createTag(t, store, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10})
	ds := &droppingStore{Postgres: store, drop: 3}
	a := newAllocator(t, ds, func(c *allocator.Config) { c.Segment.Period = time.Nanosecond })
	ids, err := a.NextN(context.Background(), "order", 25)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if id != int64(i+1) {
			t.Fatalf("ids[%d] = %d, want %d: a dropped answer cost a range", i, id, i+1)
		}
	}
	var recovered int64
	for _, st := range a.Stats() {
		recovered += st.Recovered
	}
	if recovered != 3 {
		t.Fatalf("recovered = %d, want 3", recovered)
	}
	var segments, grantedMax int64
	store.Pool().QueryRow(context.Background(), `SELECT count(*), max(last_id) FROM idmint_segments WHERE biz_tag = 'order'`).Scan(&segments, &grantedMax)
	if got := maxID(t, store, "order"); got != grantedMax || got != segments*10 {
		t.Fatalf("max_id %d, %d segments up to %d: a request was granted twice", got, segments, grantedMax)
	}
}

// TestPostgres_RetryWhileInFlight holds the tag's row lock so the original
// allocation hangs, sends a retry with the same request ID, then releases
// the lock: exactly one range is granted for the request.
func TestPostgres_RetryWhileInFlight(t *testing.T) {
	store, _ := openPostgres(t)
	ctx := context.Background()
	createTag(t, store, allocator.TagSpec{Name: "order", Step: 10})

	locker, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locker.Exec(ctx, `SELECT 1 FROM idmint_tags WHERE biz_tag = 'order' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	req := newRequest("order", 0)
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
	time.Sleep(200 * time.Millisecond) // both statements are now queued on the lock
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var granted, already int
	for range 2 {
		r := <-results
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
	store.Pool().QueryRow(ctx, `SELECT count(*) FROM idmint_segments WHERE request_id = $1`, req.ID).Scan(&rows)
	if got := maxID(t, store, "order"); got != 10 || rows != 1 {
		t.Fatalf("max_id %d, %d log rows; want 10 and 1", got, rows)
	}
}

// TestPostgres_Uniqueness runs many allocators against one database with a
// tiny fixed step, so that ranges switch constantly: zero duplicates, and
// every goroutine's IDs strictly increasing.
func TestPostgres_Uniqueness(t *testing.T) {
	const instances, goroutines, perGoroutine = 4, 16, 3200 // 204,800 IDs
	store, url := openPostgres(t)
	createTag(t, store, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 10})

	results := make([][]int64, instances*goroutines)
	var wg sync.WaitGroup
	for i := range instances {
		// Each instance has its own pool, as separate processes would.
		a := newAllocator(t, connect(t, url), func(c *allocator.Config) { c.Instance = fmt.Sprint("instance-", i) })
		for g := range goroutines {
			wg.Go(func() {
				ids := make([]int64, 0, perGoroutine)
				for range perGoroutine {
					id, err := a.Next(context.Background(), "order")
					if err != nil {
						t.Error(err)
						return
					}
					ids = append(ids, id)
				}
				results[i*goroutines+g] = ids
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	seen := make(map[int64]struct{}, instances*goroutines*perGoroutine)
	for w, ids := range results {
		for j, id := range ids {
			if _, dup := seen[id]; dup {
				t.Fatalf("duplicate id %d", id)
			}
			seen[id] = struct{}{}
			if j > 0 && id <= ids[j-1] {
				t.Fatalf("goroutine %d: id %d after %d", w, id, ids[j-1])
			}
		}
	}
	if len(seen) != instances*goroutines*perGoroutine {
		t.Fatalf("collected %d ids, want %d", len(seen), instances*goroutines*perGoroutine)
	}
	var segments int64
	store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM idmint_segments`).Scan(&segments)
	t.Logf("%d ids from %d instances x %d goroutines, %d segments of 10, max_id %d: 0 duplicates",
		len(seen), instances, goroutines, segments, maxID(t, store, "order"))
}
