package segment_test

import (
	"context"
	"testing"
	"time"

	"github.com/idmint/idmint/segment"
)

type traceKey struct{}

// TestBuffer_LoadCarriesTrigger: a load runs with the values of the take
// that started it (a trace, for a transport that reads it), and not with
// its cancellation: the take's caller went away, the load goes on.
func TestBuffer_LoadCarriesTrigger(t *testing.T) {
	type seen struct {
		value any
		err   error
	}
	loads := make(chan seen, 4)
	next := int64(1)
	b := segment.New(segment.Config{Tag: "t", Threshold: 0.5, Loader: segment.LoaderFunc(func(ctx context.Context, size int64) (segment.Grant, error) {
		time.Sleep(20 * time.Millisecond) // the taker's context ends meanwhile
		loads <- seen{ctx.Value(traceKey{}), ctx.Err()}
		r := segment.Range{First: next, Last: next + 9}
		next += 10
		return segment.Grant{Range: r, MinStep: 10, MaxStep: 10}, nil
	})})
	defer b.Close()
	first, cancel := context.WithCancel(context.WithValue(context.Background(), traceKey{}, "ready"))
	if err := b.Ready(first); err != nil {
		t.Fatal(err)
	}
	cancel()
	if got := <-loads; got.value != "ready" || got.err != nil {
		t.Fatalf("first load saw %v, %v; want the value of Ready's context and no error", got.value, got.err)
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), traceKey{}, "take"))
	for range 9 { // the take past the threshold starts the prefetch
		if _, err := b.Take(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	select {
	case got := <-loads:
		if got.value != "take" || got.err != nil {
			t.Fatalf("prefetch saw %v, %v; want the value of the take's context and no error", got.value, got.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no prefetch")
	}
}
