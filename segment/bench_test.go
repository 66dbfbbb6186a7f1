package segment_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/segment"
)

// BenchmarkBuffer_Take measures the hot path: one atomic add per ID, with
// background loads from an in-memory loader (1,000-ID minimum step).
func BenchmarkBuffer_Take(b *testing.B) {
	// The floor: a bare shared atomic counter, run side by side so that the
	// buffer's overhead reads as a ratio on a noisy machine.
	b.Run("baseline-atomic-add", func(b *testing.B) {
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n.Add(1)
			}
		})
	})
	b.Run("serial", func(b *testing.B) {
		buf := newBuffer(b, &counterLoader{minStep: 1000}, nil)
		ctx := context.Background()
		for b.Loop() {
			if _, err := buf.Take(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		buf := newBuffer(b, &counterLoader{minStep: 1000}, nil)
		takeParallel(b, buf)
	})
	// A fixed step of 100 makes the buffer switch ranges every 100 IDs:
	// the cost of the locked slow path, amortised.
	b.Run("parallel-step100", func(b *testing.B) {
		buf := newBuffer(b, &counterLoader{minStep: 100}, func(c *segment.Config) { c.Period = time.Nanosecond })
		takeParallel(b, buf)
	})
}

func BenchmarkBuffer_TakeN(b *testing.B) {
	buf := newBuffer(b, &counterLoader{minStep: 1000}, nil)
	ctx := context.Background()
	dst := make([]int64, 0, 100)
	for b.Loop() {
		var err error
		if dst, err = buf.TakeN(ctx, 100, dst[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

// takeParallel takes IDs from buf on every GOMAXPROCS goroutine for b.N.
func takeParallel(b *testing.B, buf *segment.Buffer) {
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := buf.Take(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
