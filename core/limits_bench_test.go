package core

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkLimiter_AddressChurn measures charging the per-address limit of
// one known address, alone and while 100,000 distinct addresses churn
// through the table beside it (a goroutine of its own, as a flood from
// many addresses would), and what a new address costs in a full table. The
// known address's ns/op must not grow with the churn; churn-ns/op is the
// churn's own cost, per address. Every address spends its budget (a fixed
// clock: nothing refills), as an attack does: no entry is ever idle, and
// the table never has room.
func BenchmarkLimiter_AddressChurn(b *testing.B) {
	const churners = 100_000
	addrs := make([]string, churners)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	}
	const known = "192.0.2.1"
	now := time.Unix(1_700_000_000, 0)
	fresh := func() *addrLimits { return newAddrLimits(1e-9, 1000, 10_000) }
	// full is a table that all the churning addresses went through.
	full := func() *addrLimits {
		a := fresh()
		for _, addr := range addrs {
			a.charge(addr, 100, now)
		}
		return a
	}
	b.Run("known alone", func(b *testing.B) {
		a := fresh()
		for b.Loop() {
			a.charge(known, 0, now)
		}
	})
	b.Run("known beside churn", func(b *testing.B) {
		a := full()
		var stop atomic.Bool
		var churned atomic.Int64
		var wg sync.WaitGroup
		wg.Add(1)
		start := time.Now()
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				a.charge(addrs[i%churners], 100, now)
				churned.Add(1)
			}
		}()
		for b.Loop() {
			a.charge(known, 0, now)
		}
		stop.Store(true)
		wg.Wait()
		if n := churned.Load(); n > 0 {
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(n), "churn-ns/op")
		}
	})
	b.Run("new address, table full", func(b *testing.B) {
		a := full()
		i := 0
		for b.Loop() {
			a.charge(addrs[i%churners], 100, now)
			i++
		}
	})
}
