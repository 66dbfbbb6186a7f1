package faults_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/pgtest"
)

// TestMain runs the tests with serve's grpc-go listener off
// (IDMINT_GRPC_LISTEN=off, inherited by the idmint processes the tests
// start), so that instances on one host do not contend for its default
// port; the tests of the listener set --grpc-listen.
func TestMain(m *testing.M) {
	os.Setenv("IDMINT_GRPC_LISTEN", "off")
	os.Exit(pgtest.Main(m))
}

func createTag(tb testing.TB, store *postgres.Store, name string, step, maxStep int64) {
	tb.Helper()
	if _, err := store.CreateTag(context.Background(), allocator.TagSpec{Name: name, Step: step, MaxStep: maxStep}); err != nil {
		tb.Fatal(err)
	}
}

func maxID(tb testing.TB, store *postgres.Store, tag string) int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// After a database restart the pool still holds connections the crash
	// killed; each fails once (EOF) and is dropped, so retry a few times.
	var (
		n   int64
		err error
	)
	for range 10 {
		err = store.Pool().QueryRow(ctx, `SELECT max_id FROM idmint_tags WHERE biz_tag = $1`, tag).Scan(&n)
		if err == nil {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatal(err)
	return 0
}

// ledger reads a tag's max_id with the count and total size of its logged
// segments in one statement, so in one snapshot: an allocation committing
// meanwhile is in all three or in none.
func ledger(tb testing.TB, store *postgres.Store, tag string) (maxID, segments, granted int64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := store.Pool().QueryRow(ctx, `
		SELECT t.max_id, count(s.request_id), coalesce(sum(s.last_id - s.first_id + 1), 0)
		FROM idmint_tags t LEFT JOIN idmint_segments s ON s.biz_tag = t.biz_tag
		WHERE t.biz_tag = $1
		GROUP BY t.max_id`, tag).Scan(&maxID, &segments, &granted)
	if err != nil {
		tb.Fatalf("ledger of %s: %v", tag, err)
	}
	return maxID, segments, granted
}

// newInstance returns an allocator over store, closed at cleanup, with
// test-sized timeouts that mod may change.
func newInstance(tb testing.TB, store allocator.Store, name string, mod func(*allocator.Config)) *allocator.Allocator {
	tb.Helper()
	cfg := allocator.Config{
		Store:          store,
		Instance:       name,
		Logger:         testlog.Discard(),
		AttemptTimeout: time.Second,
		RetryMin:       5 * time.Millisecond,
		RetryMax:       100 * time.Millisecond,
		Segment: segment.Config{
			WaitTimeout: time.Second,
			LoadTimeout: 5 * time.Second,
			MaxBackoff:  500 * time.Millisecond,
		},
	}
	if mod != nil {
		mod(&cfg)
	}
	a := allocator.New(cfg)
	tb.Cleanup(func() { a.Close(context.Background()) })
	return a
}

// nextFunc asks for one ID for worker w; it names the client (one
// sequential caller of one instance) and the tag.
type nextFunc func(ctx context.Context, w int) (client, tag string, id int64, err error)

// load runs workers calling next until stopped, recording every request in
// c. Failures pause the worker a little so that it does not spin.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// maxRequests bounds each worker of a load, whatever its duration.
const maxRequests = 2_000_000

func startLoad(c *checker.Checker, workers int, next nextFunc) *load {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	l := &load{cancel: cancel}
	for w := range workers {
		l.wg.Go(func() {
			for range maxRequests {
				if ctx.Err() != nil {
					return
				}
				c.Attempt()
				client, tag, id, err := next(ctx, w)
				if err != nil {
					c.Fail(err)
					select {
					case <-ctx.Done():
					case <-time.After(5 * time.Millisecond):
					}
					continue
				}
				c.Ack(client, tag, id)
			}
		})
	}
	return l
}

// stop ends the load and waits for its workers.
func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

// tagStats returns one tag's stats from a, zero if not loaded.
func tagStats(a *allocator.Allocator, tag string) segment.Stats {
	for _, st := range a.Stats() {
		if st.Tag == tag {
			return st
		}
	}
	return segment.Stats{Tag: tag}
}

// requireValid fails the test unless the report is valid and saw IDs.
func requireValid(tb testing.TB, r checker.Report) {
	tb.Helper()
	tb.Logf("checker report:\n%s", r)
	if r.IDs() == 0 {
		tb.Fatal("no id was acknowledged: the test proved nothing")
	}
	if r.Duplicates() != 0 {
		tb.Fatalf("%d DUPLICATE ids", r.Duplicates())
	}
	if r.OrderViolations != 0 {
		tb.Fatalf("%d order violations", r.OrderViolations)
	}
}
