package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/pgtest"
)

// manyInstances runs instances allocators over stores from newStore, each
// with goroutines workers that take IDs from three tags (steps 1, 1 to 10
// and 10) for at most d, and returns the checker's report.
func manyInstances(t *testing.T, newStore func() allocator.Store, instances, workers int, d time.Duration) checker.Report {
	t.Helper()
	tags := []string{"step1", "step1to10", "step10"}
	allocs := make([]*allocator.Allocator, instances)
	for i := range allocs {
		allocs[i] = newInstance(t, newStore(), fmt.Sprint("many-", i), func(c *allocator.Config) {
			c.Segment.Period = time.Millisecond // grow the dynamic step
		})
	}
	c := checker.New()
	l := startLoad(c, instances*workers, func(ctx context.Context, w int) (string, string, int64, error) {
		tag := tags[(w/instances)%len(tags)]
		id, err := allocs[w%instances].Next(ctx, tag)
		return fmt.Sprint("worker-", w), tag, id, err
	})
	time.Sleep(d)
	l.stop()
	return c.Report()
}

// TestManyInstancesSmallSteps: no faults, the race detector on, tiny steps
// so that ranges switch all the time, many instances and goroutines: zero
// duplicates. A deliberately broken store (read max_id, then write it in a
// second statement) run through the same check must be caught: the
// checker's power.
func TestManyInstancesSmallSteps(t *testing.T) {
	const instances, workers = 8, 4 // 32 goroutines
	dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
	admin := pgstore.Open(t, dbURL)
	createTag(t, admin, "step1", 1, 1)
	createTag(t, admin, "step1to10", 1, 10)
	createTag(t, admin, "step10", 10, 10)

	t.Run("atomic store", func(t *testing.T) {
		r := manyInstances(t, func() allocator.Store { return pgstore.Open(t, dbURL) }, instances, workers, 4*time.Second)
		requireValid(t, r)
		if r.IDs() < 200 { // a floor only: step 1 is slow through a container
			t.Fatalf("only %d ids", r.IDs())
		}
		for _, tr := range r.Tags {
			t.Logf("%s: %d ids, 0 duplicates", tr.Tag, tr.IDs)
		}
	})

	t.Run("negative control: read-then-write store is caught", func(t *testing.T) {
		r := manyInstances(t, func() allocator.Store { return &brokenStore{Store: pgstore.Open(t, dbURL)} }, instances, workers, 4*time.Second)
		t.Logf("checker report:\n%s", r)
		if r.Duplicates() == 0 {
			t.Fatal("the checker found no duplicate from a store that reads max_id and writes it back in a second statement")
		}
		t.Logf("caught %d duplicates among %d ids", r.Duplicates(), r.IDs())
	})
}

// brokenStore allocates the way a careless implementation would: read
// max_id, then write max_id+step in a second statement, with no lock
// between them. Two instances can read the same max_id.
type brokenStore struct {
	*postgres.Store
}

func (s *brokenStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	var maxID, step int64
	if err := s.Pool().QueryRow(ctx, `SELECT max_id, step FROM idmint_tags WHERE biz_tag = $1`, req.Tag).Scan(&maxID, &step); err != nil {
		return allocator.Segment{}, err
	}
	time.Sleep(time.Millisecond) // widen the window a real race would use
	if _, err := s.Pool().Exec(ctx, `UPDATE idmint_tags SET max_id = $2 WHERE biz_tag = $1`, req.Tag, maxID+step); err != nil {
		return allocator.Segment{}, err
	}
	return allocator.Segment{RequestID: req.ID, Tag: req.Tag, First: maxID + 1, Last: maxID + step, Step: step, MaxStep: step}, nil
}

func (s *brokenStore) Lookup(context.Context, uuid.UUID) (allocator.Segment, error) {
	return allocator.Segment{}, allocator.ErrNotFound
}
