package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/region"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/regiontest"
	"github.com/idmint/idmint/testkit/testutil"
)

// TestPostgres_Regions: the region contract on PostgreSQL databases, one
// per region.
func TestPostgres_Regions(t *testing.T) {
	regiontest.Run(t, func(t *testing.T) regiontest.Store { s, _ := pgstore.New(t); return s })
}

// TestPostgres_FenceWaitsForGrants: a fence waits for the grant in
// flight, which holds the region lock shared from idmint_next_owned to its
// commit, and then sees its max_id: a fence below an ID that grant took is
// refused. Without the lock on either side the fence reads the max_id from
// before the grant and ends the share below an ID already granted, which a
// split would then give to another region too.
func TestPostgres_FenceWaitsForGrants(t *testing.T) {
	ctx := t.Context()
	store, url := pgstore.New(t)
	if _, err := store.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 10, MaxStep: 100}); err != nil {
		t.Fatal(err)
	}
	share, err := region.Claim("east", []string{"east", "west"}, 1, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.WriteShare(ctx, share); err != nil {
		t.Fatal(err)
	}
	grant, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { grant.Close(context.Background()) })
	// A grant in flight: the share's next ID read under the lock, max_id
	// moved, not committed yet.
	tx, err := grant.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	var first, last int64
	if err := tx.QueryRow(ctx, `SELECT first_id, last_id FROM idmint_next_owned(0)`).Scan(&first, &last); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE idmint_tags SET max_id = $1 WHERE biz_tag = 'order'`, last); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fenced := make(chan error, 1)
	go func() {
		_, err := store.FenceShare(fctx, last, false)
		fenced <- err
	}()
	testutil.Eventually(t, 10*time.Second, "the fence to wait on the grant's region lock", func() bool {
		if len(fenced) == 1 {
			return true
		}
		var n int
		if err := grant.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	if len(fenced) == 1 {
		t.Fatalf("the fence at %d answered while a grant up to %d was in flight: %v", last, last, <-fenced)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-fenced; !errors.Is(err, region.ErrGranted) {
		t.Fatalf("fence at %d after a grant up to %d committed: %v; want ErrGranted", last, last, err)
	}
	got, err := store.Share(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f := got.Fence(); f != 0 {
		t.Fatalf("the share is fenced at %d below a granted ID %d", f, last)
	}
}
