package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// openLoop sends calls on a fixed schedule: call k is due at start +
// k/rate, and the first free worker sends it (at once when it is late).
// Its latency counts from when it was due, not from when it was sent, so
// that a server that stalls is charged for every call that waited behind
// it (no coordinated omission, as wrk2 measures).
type openLoop struct {
	conns, workers int
	duration       time.Duration
}

// run sends rate calls a second for d (the loop's duration when 0) over
// o.conns connections of dial shared by o.workers goroutines, and returns
// the calls answered, over the time from the first due to the last
// answer, with p50 and p99 from when each was due, and the failed calls.
func (o openLoop) run(ctx context.Context, dial dialer, rate float64, d time.Duration) (result, error) {
	if d == 0 {
		d = o.duration
	}
	calls, closeAll, err := openConns(ctx, dial, o.conns)
	if err != nil {
		return result{}, err
	}
	defer closeAll()
	interval := time.Duration(float64(time.Second) / rate)
	total := int64(d / interval)
	var (
		next     atomic.Int64
		failed   atomic.Int64
		answered atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		samples  = make([]time.Duration, 0, min(total, maxSamples))
		last     time.Time
	)
	start := time.Now().Add(10 * time.Millisecond)
	for w := range o.workers {
		call := calls[w%len(calls)]
		wg.Go(func() {
			var mine []time.Duration
			var end time.Time
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= total {
					break
				}
				due := start.Add(time.Duration(k) * interval)
				if wait := time.Until(due); wait > 0 {
					time.Sleep(wait)
				}
				err := call(ctx)
				end = time.Now()
				if len(mine) < maxSamples {
					mine = append(mine, end.Sub(due))
				}
				answered.Add(1)
				if err != nil {
					failed.Add(1)
				}
			}
			mu.Lock()
			samples = append(samples, mine...)
			if end.After(last) {
				last = end
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	r := result{requests: answered.Load(), duration: last.Sub(start), non2xx: failed.Load()}
	r.p50, r.p99 = percentiles(samples)
	return r, nil
}
