package faults_test

import (
	"context"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/pgtest"
	"github.com/idmint/idmint/segment"
)

// serveWaitTimeout is idmint serve's --wait-timeout.
const serveWaitTimeout = 2 * time.Second

// TestFarDatabase_ColdTagFirstRequest: with 400 ms each way and serve's
// timeouts (3 s attempts, 2 s --wait-timeout), the first request for a tag
// this instance has never loaded reads the tag catalog and waits for the
// tag's first fetch, on the one warm connection a started instance has.
// That takes more than --wait-timeout; it succeeds because a cold tag's
// first wait, and the catalog read, follow the round trip. A second tag,
// known to the catalog by then, succeeds the same way.
func TestFarDatabase_ColdTagFirstRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("far database: slow round trips")
	}
	const oneWay = 400 * time.Millisecond
	dbURL := newDatabase(t, pgtest.Shared(t))
	direct := open(t, dbURL)
	tags := []string{"cold", "colder"}
	for _, tag := range tags {
		createTag(t, direct, tag, 1000, 1000)
	}
	px := far(t, dbURL, oneWay)
	store := open(t, px.URL)
	rt := store.RoundTrip()
	pingAsServe(t, store)
	a := newInstance(t, store, "far", func(c *allocator.Config) {
		c.AttemptTimeout, c.RetryMin, c.RetryMax = serveAttemptTimeout, 0, 0
		c.Segment = segment.Config{WaitTimeout: serveWaitTimeout}
		c.RoundTrip = rt
	})
	for _, tag := range tags {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		id, err := a.Next(ctx, tag)
		took := time.Since(start)
		cancel()
		t.Logf("%s: first request %v (round trip %v, fetch timeout %v): id %d, err %v",
			tag, took.Round(time.Millisecond), rt.Estimate().Round(time.Millisecond), a.RoundTrip().FetchTimeout, id, err)
		if err != nil {
			t.Fatalf("first request for cold tag %q at %v each way: %v", tag, oneWay, err)
		}
		if id != 1 {
			t.Fatalf("first id of %q: %d, want 1", tag, id)
		}
	}
}
