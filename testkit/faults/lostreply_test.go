package faults_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/testlog"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/testkit/toxic"
)

// TestLostReplyAfterCommit loses the reply to committed allocations: a
// reset_peer toxic on the proxy's downstream direction resets the connection
// when PostgreSQL answers, after the commit. The instance must find each
// committed range again by its request ID (recovered_replies in /id/health),
// take no second range for it, and hand out every ID once, without a gap.
func TestLostReplyAfterCommit(t *testing.T) {
	const rounds, step = 5, 10
	const recoveryLimit = 5 * time.Second
	dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
	direct := pgstore.Open(t, dbURL)
	createTag(t, direct, "order", step, step)
	px := toxic.New(t, dbURL)
	// One connection: it has prepared the allocation statement before the
	// toxic goes on, so the first bytes PostgreSQL sends back for the
	// allocation are its answer after COMMIT.
	store := &observedStore{Store: pgstore.Open(t, px.URL+"&pool_max_conns=1")}
	a := newInstance(t, store, "lost-reply", func(c *allocator.Config) {
		c.Segment.LoadTimeout = 30 * time.Second
	})
	api := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()}))
	defer api.Close()

	ctx := context.Background()
	c := checker.New()
	take := func() {
		t.Helper()
		c.Attempt()
		id, err := a.Next(ctx, "order")
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		c.Ack("client", "order", id)
	}
	take()
	for round := 1; round <= rounds; round++ {
		testutil.Eventually(t, 10*time.Second, "the next range", func() bool {
			st := tagStats(a, "order")
			if st.NextRange == nil && !st.Loading {
				take() // crossing the threshold starts the prefetch
			}
			return st.NextRange != nil && !st.Loading
		})
		before := maxID(t, direct, "order")
		calls := store.allocations()
		// AddToxicJson returns once every open link of the proxy routes its
		// stream through the toxic (toxiproxy interrupts each link's last
		// stub and rewires it before it returns), so the next reply on the
		// instance's one connection is the one lost. The wait below checks
		// it happened.
		px.Add(t, "lose-reply", "reset_peer", "downstream", `{"timeout":0}`)
		// Take IDs until one starts a load: its reply is lost.
		for i := 0; !tagStats(a, "order").Loading; i++ {
			if i > 3*step {
				t.Fatal("no load started")
			}
			take()
		}
		testutil.Eventually(t, 10*time.Second, "the allocation to commit", func() bool { return maxID(t, direct, "order") > before })
		// The toxic acted: the allocation committed, and its attempt
		// ended in an ambiguous error, not a reply.
		testutil.Eventually(t, 10*time.Second, "the allocation's reply to be lost", func() bool {
			now := store.allocations()
			if now.ok > calls.ok {
				t.Fatalf("round %d: an allocation got its reply with the toxic on: the toxic was not in place", round)
			}
			return now.ambiguous > calls.ambiguous
		})
		px.Remove(t, "lose-reply")
		d := testutil.Eventually(t, 20*time.Second, "the range to be recovered", func() bool { return tagStats(a, "order").Recovered == int64(round) })
		t.Logf("round %d: reply lost after commit, range recovered by request id %v after the proxy healed", round, d.Round(time.Millisecond))
		// Retries back off at most 100ms here: a recovery that takes
		// seconds waits for something it should not.
		if d > recoveryLimit {
			t.Fatalf("round %d: the range was recovered %v after the proxy healed, more than %v", round, d, recoveryLimit)
		}
		// The recovery ran on a new connection; let it run one allocation
		// too, so that it has the statement prepared for the next round.
		loads := tagStats(a, "order").Loads
		for i := 0; tagStats(a, "order").Loads == loads; i++ {
			if i > 3*step {
				t.Fatal("no load after the recovery")
			}
			take()
			time.Sleep(time.Millisecond)
		}
	}
	// Serve past the last recovered range: the recovered ranges must be
	// the ones served.
	for range 2 * step {
		take()
	}

	r := c.Report()
	requireValid(t, r)
	tr := r.Tag("order")
	if tr.Lowest != 1 || tr.Missing != 0 {
		t.Fatalf("ids %d..%d with %d missing: a lost reply cost a range", tr.Lowest, tr.Highest, tr.Missing)
	}
	// max_id and the segment log in one snapshot (one statement): a
	// prefetch that commits meanwhile moves both or neither.
	m, segments, granted := ledger(t, direct, "order")
	// Only the instance's buffered ranges may be above what was served.
	if m != granted || m-tr.Highest > 2*step {
		t.Fatalf("max_id %d, %d ids in %d logged segments, highest served %d: a request was granted twice", m, granted, segments, tr.Highest)
	}

	var h httpapi.Health
	testutil.GetJSON(t, api.URL+"/id/health", &h)
	if len(h.Tags) != 1 || h.Tags[0].Recovered != rounds {
		t.Fatalf("/id/health tags %+v: want recovered_replies %d", h.Tags, rounds)
	}
	t.Logf("%d lost replies, all recovered (recovered_replies %d); %d ids served in %d segments, 0 duplicates, 0 gaps",
		rounds, h.Tags[0].Recovered, tr.IDs, segments)
}

// observedStore counts how the allocations of a store ended.
type observedStore struct {
	*postgres.Store
	mu    sync.Mutex
	calls allocationCounts
}

type allocationCounts struct{ ok, ambiguous, other int }

func (s *observedStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	seg, err := s.Store.Allocate(ctx, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		s.calls.ok++
	case errors.Is(err, allocator.ErrAmbiguous):
		s.calls.ambiguous++
	default:
		s.calls.other++
	}
	return seg, err
}

func (s *observedStore) allocations() allocationCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// countingStore counts the allocation attempts of each request ID.
type countingStore struct {
	allocator.Store
	mu    sync.Mutex
	calls map[uuid.UUID]int
}

func (s *countingStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	s.mu.Lock()
	s.calls[req.ID]++
	s.mu.Unlock()
	return s.Store.Allocate(ctx, req)
}

func (s *countingStore) attempts() (uuid.UUID, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var id uuid.UUID
	n := 0
	for k, v := range s.calls {
		if v > n {
			id, n = k, v
		}
	}
	return id, n
}

// TestRetryWhileInFlight holds the tag's row lock from another session, so
// that the instance's allocation hangs in PostgreSQL; the attempt times out
// on the instance's side (the statement may still run) and the instance
// retries the same request ID, through the proxy, while the original is in
// flight. When the lock goes, exactly one range is granted for the request.
func TestRetryWhileInFlight(t *testing.T) {
	const step = 10
	dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
	direct := pgstore.Open(t, dbURL)
	createTag(t, direct, "order", step, step)
	px := toxic.New(t, dbURL)
	store := &countingStore{Store: pgstore.Open(t, px.URL), calls: map[uuid.UUID]int{}}
	a := newInstance(t, store, "in-flight", func(c *allocator.Config) {
		c.AttemptTimeout = 300 * time.Millisecond
		c.Segment.LoadTimeout = 30 * time.Second
		c.Segment.WaitTimeout = 30 * time.Second
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	locker, err := direct.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the instance's, so it runs first: a failing test
	// releases the lock before the instance's Close waits for its load.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = locker.Rollback(ctx) // after the test's own rollback: ErrTxClosed
	})
	if _, err := locker.Exec(ctx, `SELECT 1 FROM idmint_tags WHERE biz_tag = 'order' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		id  int64
		err error
	}
	first := make(chan result, 1)
	go func() {
		id, err := a.Next(ctx, "order")
		first <- result{id, err}
	}()
	testutil.Eventually(t, 20*time.Second, "three attempts of one request", func() bool { _, n := store.attempts(); return n >= 3 })
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var res result
	select {
	case res = <-first:
	case <-time.After(time.Minute):
		t.Fatal("Next did not return within a minute of the lock's release")
	}
	if res.err != nil || res.id != 1 {
		t.Fatalf("Next = %d, %v; want 1", res.id, res.err)
	}
	reqID, attempts := store.attempts()

	c := checker.New()
	c.Ack("client", "order", res.id)
	for range 3*step - 1 {
		id, err := a.Next(ctx, "order")
		if err != nil {
			t.Fatal(err)
		}
		c.Ack("client", "order", id)
	}
	r := c.Report()
	requireValid(t, r)
	if tr := r.Tag("order"); tr.Missing != 0 || tr.Highest != 3*step {
		t.Fatalf("ids up to %d, %d missing: a range leaked", tr.Highest, tr.Missing)
	}
	var rows int
	var first64, last64 int64
	if err := direct.Pool().QueryRow(ctx, `SELECT count(*), min(first_id), max(last_id) FROM idmint_segments WHERE request_id = $1`, reqID).Scan(&rows, &first64, &last64); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || first64 != 1 || last64 != step {
		t.Fatalf("request %s: %d segments [%d, %d]; want exactly one, [1, %d]", reqID, rows, first64, last64, step)
	}
	if m, segments, granted := ledger(t, direct, "order"); m != granted {
		t.Fatalf("max_id %d but %d logged segments hold %d ids: an attempt moved max_id without a segment", m, segments, granted)
	}
	t.Logf("request %s: %d attempts while the original was held in PostgreSQL, exactly 1 segment granted; %d ids, 0 duplicates, 0 gaps",
		reqID, attempts, r.IDs())
}
