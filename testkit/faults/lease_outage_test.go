package faults_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/lease"
	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/snowtest"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/testkit/toxic"
)

// leaseTTL is the lease of the outage tests.
const leaseTTL = 4 * time.Second

// nodeConfig: a 4 s lease renewed every 400 ms, a 200 ms margin.
func nodeConfig(store snowflake.LeaseStore, holder string) snowflake.Config {
	return snowflake.Config{Layout: snowtest.TwoWorkers, Store: store, Holder: holder, TTL: leaseTTL,
		RenewEvery: 400 * time.Millisecond, Margin: 200 * time.Millisecond}
}

// hammerNode asks n for IDs until stopped, acknowledging them to c as client;
// stop returns the IDs and the errors met, by kind.
func hammerNode(n *snowflake.Node, c *checker.Checker, client string) (stop func() ([]int64, map[string]int)) {
	var (
		ids    []int64
		errs   = map[string]int{}
		done   = make(chan struct{})
		halted = make(chan struct{})
	)
	go func() {
		defer close(halted)
		for {
			select {
			case <-done:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			batch, err := n.NextN(ctx, 10)
			cancel()
			c.Attempt()
			if err != nil {
				c.Fail(err)
				for _, kind := range []error{snowflake.ErrNoWorker, snowflake.ErrLeaseExpired, snowflake.ErrClockSkew, snowflake.ErrClockBackwards} {
					if errors.Is(err, kind) {
						errs[kind.Error()]++
					}
				}
				time.Sleep(time.Millisecond)
				continue
			}
			c.Ack(client, "snowflake", batch...)
			ids = append(ids, batch...)
		}
	}()
	var once sync.Once
	return func() ([]int64, map[string]int) {
		once.Do(func() { close(done); <-halted })
		return ids, errs
	}
}

// TestLease_DatabaseOutage cuts the database off from one instance, behind a
// blackholing proxy, for less and for more than the lease TTL (4 s).
//
// Shorter: the instance keeps issuing IDs all through, on the same lease.
// Longer: its window ends a margin before the lease expires and it refuses;
// another instance takes the worker ID after the expiry and issues IDs above
// the old window; when the database comes back the first finds its lease
// lost and, no worker ID being free, serves none. No ID twice throughout.
func TestLease_DatabaseOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("outage")
	}
	for _, tc := range []struct {
		name   string
		outage time.Duration
	}{
		{"shorter than the ttl", time.Second},
		{"longer than the ttl", 5500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
			px := toxic.New(t, dbURL)
			c := checker.New()
			cut := snowtest.Start(t, nodeConfig(lease.NewPostgres(pgstore.Open(t, px.URL).Pool()), "cut"))
			other := snowtest.Start(t, nodeConfig(lease.NewPostgres(pgstore.Open(t, dbURL).Pool()), "other"))
			if cut.Stats().Worker != 0 || other.Stats().Worker != 1 {
				t.Fatalf("workers: cut %d, other %d", cut.Stats().Worker, other.Stats().Worker)
			}
			stopCut, stopOther := hammerNode(cut, c, "cut"), hammerNode(other, c, "other")
			// Load before the outage; cut it just after a renewal, so that
			// the shorter outage has the whole lease to ride through.
			renewed := cut.Stats().Renewals
			testutil.Eventually(t, 10*time.Second, "a renewal before the outage", func() bool { return cut.Stats().Renewals > renewed })
			px.Cut(t)
			begin := time.Now()
			var successor *snowflake.Node
			var stopSuccessor func() ([]int64, map[string]int)
			if tc.outage > leaseTTL {
				successor = snowtest.Start(t, nodeConfig(lease.NewPostgres(pgstore.Open(t, dbURL).Pool()), "successor"))
				testutil.Eventually(t, 10*time.Second, "the successor to take worker 0", func() bool { return successor.Stats().Worker == 0 })
				stopSuccessor = hammerNode(successor, c, "successor")
			}
			time.Sleep(tc.outage - time.Since(begin))
			px.Heal(t)

			if successor == nil {
				// Renewals resume on the same lease.
				renewals := cut.Stats().Renewals
				testutil.Eventually(t, 10*time.Second, "a renewal after the outage", func() bool { return cut.Stats().Renewals > renewals })
			} else {
				testutil.Eventually(t, 10*time.Second, "the cut instance to find its lease lost", func() bool { return cut.Stats().Losses == 1 })
				time.Sleep(300 * time.Millisecond) // load after the outage
			}
			cutIDs, cutErrs := stopCut()
			_, otherErrs := stopOther()
			st := cut.Stats()
			r := c.Report()
			t.Logf("cut: %d ids, refusals %v, stats %+v; other refusals %v\n%s", len(cutIDs), cutErrs, st, otherErrs, r)
			if !r.Valid() {
				t.Fatalf("duplicates or order violations:\n%s", r)
			}
			if len(otherErrs) != 0 {
				t.Errorf("the instance that kept its database refused: %v", otherErrs)
			}
			if successor == nil {
				if len(cutErrs) != 0 || st.Epoch != 1 || st.Worker != 0 || st.RenewFailures == 0 {
					t.Fatalf("an outage shorter than the lease: refusals %v, stats %+v", cutErrs, st)
				}
				return
			}
			succIDs, _ := stopSuccessor()
			if cutErrs[snowflake.ErrLeaseExpired.Error()] == 0 || st.Worker != -1 || !errors.Is(st.Serving, snowflake.ErrNoWorker) {
				t.Fatalf("an outage longer than the lease: refusals %v, stats %+v", cutErrs, st)
			}
			if len(succIDs) == 0 {
				t.Fatal("the successor issued nothing")
			}
			var lastCut int64
			for _, id := range cutIDs {
				p, _ := snowtest.TwoWorkers.Parse(id)
				lastCut = max(lastCut, p.UnixMilli)
			}
			for _, id := range succIDs {
				if p, _ := snowtest.TwoWorkers.Parse(id); p.Worker != 0 || p.UnixMilli <= lastCut {
					t.Fatalf("successor id %+v not after the cut instance's last millisecond %d", p, lastCut)
				}
			}
		})
	}
}
