package storetest

import (
	"os"
	"strconv"
	"strings"
	"testing"
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
