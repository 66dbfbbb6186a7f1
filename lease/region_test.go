package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idmint/idmint/region"
	"github.com/idmint/idmint/snowflake"
)

// TestLease_RegionSlices: two regions' databases, each leasing every worker
// ID its slice holds (region.WorkerSlice), never lease the same worker ID,
// and neither leases one outside its slice; on PostgreSQL and SQLite.
func TestLease_RegionSlices(t *testing.T) {
	for name, open := range map[string]func(*testing.T) func() snowflake.LeaseStore{"postgres": openPostgres, "sqlite": openSQLite} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			layout := snowflake.Layout{Epoch: snowflake.DefaultEpoch, TimeBits: 53, WorkerBits: 4, SequenceBits: 6}
			holders := map[int64]int{}
			for slot := range 2 {
				store := open(t)()
				if err := store.Prepare(ctx, layout); err != nil {
					t.Fatal(err)
				}
				lo, hi, ok := region.WorkerSlice(slot, 2, layout.MaxWorker())
				if !ok {
					t.Fatal("empty slice")
				}
				leased := 0
				for {
					l, err := store.Acquire(ctx, snowflake.AcquireRequest{Holder: "r", MinWorker: lo, MaxWorker: hi, TTL: time.Minute, Margin: time.Second})
					if errors.Is(err, snowflake.ErrAllHeld) {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					if l.Worker < lo || l.Worker > hi {
						t.Fatalf("slot %d leased worker id %d outside [%d, %d]", slot, l.Worker, lo, hi)
					}
					if other, ok := holders[l.Worker]; ok {
						t.Fatalf("worker id %d leased by slots %d and %d", l.Worker, other, slot)
					}
					holders[l.Worker] = slot
					if leased++; leased > 16 {
						t.Fatal("more leases than worker ids")
					}
				}
				if leased != int(hi-lo+1) {
					t.Fatalf("slot %d leased %d of its %d worker ids", slot, leased, hi-lo+1)
				}
			}
			if len(holders) != 16 {
				t.Fatalf("%d worker ids leased over two regions, want all 16", len(holders))
			}
		})
	}
}
