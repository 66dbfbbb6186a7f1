package storetest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
)

// benchLogRows are the segment-log sizes the give-back benchmarks run at,
// unless IDMINT_BENCH_LOG_ROWS lists others.
var benchLogRows = []int64{0, 1_000_000, 10_000_000}

// BenchLogRows returns the segment-log sizes a give-back benchmark runs at:
// 0, 1 M and 10 M rows, or those IDMINT_BENCH_LOG_ROWS lists
// (comma-separated).
func BenchLogRows(tb testing.TB) []int64 {
	tb.Helper()
	spec := os.Getenv("IDMINT_BENCH_LOG_ROWS")
	if spec == "" {
		return benchLogRows
	}
	var rows []int64
	for f := range strings.SplitSeq(spec, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || n < 0 {
			tb.Fatalf("IDMINT_BENCH_LOG_ROWS=%q: want row counts, comma-separated", spec)
		}
		rows = append(rows, n)
	}
	return rows
}

// BenchGiveBack times one give-back on store's tag (created with step 10)
// at each size of BenchLogRows: a caller's range tail (GiveBackRange) and
// an instance's at shutdown (GiveBack), each op after a grant that is not
// timed. fill grows the tag's segment log from have to rows rows, the
// store's own way, and returns how long it took.
func BenchGiveBack(b *testing.B, store allocator.Store, tag string, fill func(b *testing.B, have, rows int64) time.Duration) {
	holder := allocator.NewHolder("anonymous", "bench key")
	ctx := context.Background()
	var have int64
	for _, rows := range BenchLogRows(b) {
		took := fill(b, have, rows)
		have = max(have, rows)
		b.Logf("segment log of %d rows (filled in %v)", have, took.Round(time.Millisecond))
		b.Run(fmt.Sprintf("caller/rows=%d", rows), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				req := NewRequest(tag, 10)
				req.Holder = holder
				seg, err := store.Allocate(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if ok, err := store.GiveBackRange(ctx, req.ID, holder, tag, seg.First+5, seg.Last); err != nil || !ok {
					b.Fatalf("GiveBackRange = %v, %v", ok, err)
				}
			}
		})
		b.Run(fmt.Sprintf("instance/rows=%d", rows), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				seg, err := store.Allocate(ctx, NewRequest(tag, 10))
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if ok, err := store.GiveBack(ctx, tag, seg.First+5, seg.Last); err != nil || !ok {
					b.Fatalf("GiveBack = %v, %v", ok, err)
				}
			}
		})
	}
}
