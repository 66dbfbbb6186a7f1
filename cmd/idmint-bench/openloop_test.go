package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestOpenLoop_Schedule: the open loop sends exactly rate × duration calls
// (one per slot of the schedule, each once), over the connections it
// opened (after one warming call each), counts the failed ones, and closes
// every connection.
func TestOpenLoop_Schedule(t *testing.T) {
	var calls, opened, closed atomic.Int64
	dial := func(context.Context) (func(context.Context) error, func(), error) {
		opened.Add(1)
		call := func(context.Context) error {
			if calls.Add(1)%10 == 0 {
				return errors.New("every tenth call fails")
			}
			return nil
		}
		return call, func() { closed.Add(1) }, nil
	}
	o := openLoop{conns: 2, workers: 8, duration: 200 * time.Millisecond}
	r, err := o.run(context.Background(), dial, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.requests != 200 || calls.Load() != 200+2 {
		t.Errorf("%d answered, %d calls; want 200 answered after 2 warming calls", r.requests, calls.Load())
	}
	if r.non2xx != 20 {
		t.Errorf("%d failed, want 20 (calls 10, 20, … 200 of the 202)", r.non2xx)
	}
	if opened.Load() != 2 || closed.Load() != 2 {
		t.Errorf("%d connections opened, %d closed; want 2 and 2", opened.Load(), closed.Load())
	}
}
