package segment_test

import (
	"context"
	"sync"
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

// sleepLoader is counterLoader with a load latency, as a database round
// trip would have.
type sleepLoader struct {
	counterLoader
	latency time.Duration
}

func (l *sleepLoader) Load(ctx context.Context, size int64) (segment.Grant, error) {
	t := time.NewTimer(l.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return segment.Grant{}, ctx.Err()
	}
	return l.counterLoader.Load(ctx, size)
}

// BenchmarkBuffer_FreshTag measures the segment switches of a fresh tag
// with step 10: 64 goroutines take 2,000 IDs each while every load takes
// 2 ms. wait-ms/op sums the time spent in takes that waited for a load
// (200 µs or more; the first load is always waited for, by all 64), loads/op
// counts the loads.
func BenchmarkBuffer_FreshTag(b *testing.B) {
	const takers, each = 64, 2000
	ctx := context.Background()
	var waited time.Duration
	var loads int64
	for b.Loop() {
		l := &sleepLoader{counterLoader: counterLoader{minStep: 10}, latency: 2 * time.Millisecond}
		buf := segment.New(segment.Config{Tag: "t", Loader: l, Logger: quiet()})
		var slow atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{}) // all takers at once, as connections would
		for range takers {
			wg.Go(func() {
				<-start
				for range each {
					t0 := time.Now()
					if _, err := buf.Take(ctx); err != nil {
						b.Error(err)
						return
					}
					if d := time.Since(t0); d >= 200*time.Microsecond {
						slow.Add(int64(d))
					}
				}
			})
		}
		close(start)
		wg.Wait()
		buf.Close()
		waited += time.Duration(slow.Load())
		loads += l.loads.Load()
	}
	b.ReportMetric(float64(waited.Milliseconds())/float64(b.N), "wait-ms/op")
	b.ReportMetric(float64(loads)/float64(b.N), "loads/op")
}
