package allocator_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/testkit/starvetest"
)

// TestAllocator_StarvedTag is the server's side of the client's starved
// tag: many requests on a tag whose segments hold 5 IDs (max_step 5) from a
// slow store. The requests that wait are served in turn from the segments
// that arrive, and none fails while they keep arriving (see starvetest).
func TestAllocator_StarvedTag(t *testing.T) {
	const step = 5
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: step, MaxStep: step}); err != nil {
		t.Fatal(err)
	}
	var ranges atomic.Int64 // segments granted to the tag's buffer
	a := newAllocator(t, &starvetest.SlowStore{Store: m, Latency: 2 * time.Millisecond}, func(c *allocator.Config) {
		c.Segment.WaitTimeout = time.Second
		c.Segment.OnLoad = func(_ string, _ time.Duration, err error) {
			if err == nil {
				ranges.Add(1)
			}
		}
	})
	starvetest.Run(t, 64, 40, step,
		func(ctx context.Context) (int64, error) { return a.Next(ctx, "order") },
		ranges.Load)
}
