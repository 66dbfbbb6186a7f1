// Package snowtest starts Snowflake nodes for tests: the one copy of
// snowflake.Start with a bounded context and a Close when the test ends.
//
//	n := snowtest.Start(t, snowflake.Config{Layout: snowtest.TwoWorkers, Store: lease.NewMemory(nil), Holder: "a"})
package snowtest

import (
	"context"
	"testing"
	"time"

	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/testkit/testlog"
)

// TwoWorkers is a layout with worker IDs 0 and 1.
var TwoWorkers = snowflake.Layout{Epoch: snowflake.DefaultEpoch, TimeBits: 50, WorkerBits: 1, SequenceBits: 12}

// Start starts a node on cfg (its logs discarded when cfg has no logger),
// waiting at most 10 s, and closes it when the test ends.
func Start(tb testing.TB, cfg snowflake.Config) *snowflake.Node {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testlog.Discard()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := snowflake.Start(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Close(ctx)
	})
	return n
}
