package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testutil"
)

// TestPostgres_RoundTripIsTheNetworks: statements that keep the server
// busy (pg_sleep) or wait for a row lock another transaction holds take
// long on the wire, yet do not raise the store's round-trip estimate, so
// they lengthen no timeout: the estimate stays the network's, seen on the
// exchanges that wait on nothing. The estimator's clock is frozen, so that
// every exchange of the test falls in one window.
func TestPostgres_RoundTripIsTheNetworks(t *testing.T) {
	ctx := context.Background()
	url := pgstore.NewDatabase(t, pgtest.Shared(t))
	clock := time.Unix(1_700_000_000, 0)
	rt := allocator.NewRoundTripClock(0, 0, func() time.Time { return clock })
	store, err := postgres.OpenMeasured(ctx, url, rt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	createTag(t, store, allocator.TagSpec{Name: "order", Step: 10})
	for range 3 {
		if err := store.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	network := rt.Estimate()
	if network <= 0 {
		t.Fatal("no round trip measured on the pool's connections")
	}
	const slow = 300 * time.Millisecond
	t.Logf("network: %v; the slow exchanges take %v or more", network, slow)
	check := func(t *testing.T, what string) {
		t.Helper()
		if got := rt.Estimate(); got > network || got >= slow {
			t.Fatalf("after %s: estimate %v, was %v: server time counted as distance", what, got, network)
		}
	}

	t.Run("slow statements", func(t *testing.T) {
		for range 3 {
			if _, err := store.Pool().Exec(ctx, `SELECT pg_sleep($1)`, slow.Seconds()); err != nil {
				t.Fatal(err)
			}
			check(t, "a statement of "+slow.String())
		}
	})

	t.Run("a wait for the tag's row lock", func(t *testing.T) {
		// The lock is held on a connection of its own, not measured.
		holder, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close(ctx)
		tx, err := holder.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `SELECT max_id FROM idmint_tags WHERE biz_tag = 'order' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		// What a grant and a give-back of the tag run first.
		waited := make(chan error, 1)
		go func() {
			_, err := store.Pool().Exec(ctx, `SELECT max_id FROM idmint_tags WHERE biz_tag = 'order' FOR UPDATE`)
			waited <- err
		}()
		testutil.Eventually(t, 30*time.Second, "the statement to wait for the row lock", func() bool {
			var n int
			err := holder.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name = 'idmint'`).Scan(&n)
			return err == nil && n == 1
		})
		// Held while the server works: the waiter's exchange takes at
		// least this long.
		if _, err := tx.Exec(ctx, `SELECT pg_sleep($1)`, slow.Seconds()); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
		check(t, "a wait of "+slow.String()+" or more for a row lock")
	})
}
