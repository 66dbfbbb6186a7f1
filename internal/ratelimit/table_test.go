package ratelimit_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/idmint/idmint/internal/ratelimit"
)

var t0 = time.Unix(1_700_000_000, 0)

// churnAddr is the i-th of many distinct addresses.
func churnAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}

// TestTable_Churn: 100,000 distinct keys, each spending its budget, pass
// through a table of 10,000. The table never holds more than its capacity
// (and its shards' rounding), and a key that spent its budget before the
// churn is still refused during and after it: whether it keeps asking or
// stays silent while the churn would push it out of a plain LRU.
func TestTable_Churn(t *testing.T) {
	const capacity, churners, burst = 10_000, 100_000, 100
	for _, tc := range []struct {
		name string
		poll bool // the limited key asks again during the churn
	}{
		{name: "limited key asking during the churn", poll: true},
		{name: "limited key silent during the churn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One ID per 1,000 s: the 100 s of churn earn none back.
			tab := ratelimit.New[netip.Addr](0.001, burst, capacity)
			limited := netip.MustParseAddr("192.0.2.1")
			now := t0
			if !tab.Get(limited, now).AllowN(now, burst) {
				t.Fatal("the limited key's first burst was refused")
			}
			most := 0
			for i := range churners {
				// A millisecond a key, 100 s in all.
				now = now.Add(time.Millisecond)
				tab.Get(churnAddr(i), now).AllowN(now, burst)
				if i%1000 == 0 {
					most = max(most, tab.Len())
				}
				if tc.poll && i%1000 == 999 && tab.Get(limited, now).AllowN(now, 1) {
					t.Fatalf("the limited key was served after %d churning keys", i+1)
				}
			}
			most = max(most, tab.Len())
			if most > capacity+15 || most < capacity {
				t.Fatalf("the table held up to %d keys; want its capacity %d (+15 of the shards' rounding)", most, capacity)
			}
			// A plain LRU would have dropped the silent key long ago,
			// and given it a full bucket now.
			if tab.Get(limited, now).AllowN(now, 1) {
				t.Fatal("the limited key got more than its budget after the churn: the churn reset its bucket")
			}
		})
	}
}

// TestTable_Get: a full table replaces an idle key (its bucket full
// again), never a busy one; new keys that find only busy ones share one
// overflow bucket; a known key keeps its bucket.
func TestTable_Get(t *testing.T) {
	const burst = 10
	a, b, c, d := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"),
		netip.MustParseAddr("192.0.2.3"), netip.MustParseAddr("192.0.2.4")
	tab := ratelimit.New[netip.Addr](1, burst, 1) // one key, refilled in 10 s
	now := t0
	if !tab.Get(a, now).AllowN(now, burst) {
		t.Fatal("a's burst refused")
	}
	// a is busy: b and c share the overflow bucket.
	if !tab.Get(b, now).AllowN(now, burst) {
		t.Fatal("b's burst (the overflow bucket) refused")
	}
	if tab.Get(c, now).AllowN(now, 1) {
		t.Fatal("c was served from the overflow bucket b spent: new keys do not share one budget")
	}
	if tab.Len() != 1 || tab.Get(a, now).AllowN(now, 1) {
		t.Fatalf("a busy key was dropped for new ones (len %d)", tab.Len())
	}
	// 9 s later a is still one short of full; at 10 s it is idle, and d
	// takes its place with a full bucket of its own.
	now = now.Add(9 * time.Second)
	if tab.Get(d, now).AllowN(now, burst) {
		t.Fatal("d got a full burst while a was still busy")
	}
	now = now.Add(2 * time.Second)
	if !tab.Get(d, now).AllowN(now, burst) || tab.Len() != 1 {
		t.Fatalf("d did not replace the idle a (len %d)", tab.Len())
	}
	if !tab.Get(a, now).AllowN(now, burst) {
		t.Fatal("a, dropped while idle, did not come back with a full bucket")
	}
}

// TestTable_Shards: keys spread over the shards, each with a bucket of its
// own. (Half the capacity: a shard's share of random keys varies.)
func TestTable_Shards(t *testing.T) {
	const capacity, keys = 10_000, 5_000
	tab := ratelimit.New[netip.Addr](1, 1, capacity)
	for i := range keys {
		if !tab.Get(churnAddr(i), t0).AllowN(t0, 1) {
			t.Fatalf("key %d shares a bucket before the table is full", i)
		}
	}
	if n := tab.Len(); n != keys {
		t.Fatalf("len %d, want %d", n, keys)
	}
}
