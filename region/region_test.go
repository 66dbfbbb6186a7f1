package region

import (
	"errors"
	"math"
	"testing"
)

// grants walks a database of share s granting ranges of size from after,
// as the stores do (the next owned ID, clipped at its block's end), and
// calls seen with each range; at most limit ranges.
func grants(s Share, after, size int64, limit int, seen func(first, last int64)) {
	for range limit {
		first, last, ok := s.NextOwned(after)
		if !ok {
			return
		}
		if last-first >= size {
			last = first + size - 1
		}
		seen(first, last)
		after = last
	}
}

// owner is the index that owns id in shares of epochs, by the definition:
// block j = (id - from) / block is region j mod N's; -1 outside them.
func owner(epochs []Epoch, id int64) int {
	for _, e := range epochs {
		if id >= e.From && id <= e.Last() {
			return e.Owner(id)
		}
	}
	return -1
}

func shareOf(epochs []Epoch, k int) Share {
	s := Share{Name: epochs[0].Regions[k], WorkerSlot: k, WorkerSlots: len(epochs[0].Regions)}
	for _, e := range epochs {
		e.Index = k
		s.Epochs = append(s.Epochs, e)
	}
	return s
}

func TestShare_NextOwned(t *testing.T) {
	regions := []string{"eu", "us", "ap"}
	epochs := []Epoch{{From: 1, To: 10_001, Block: 1000, Regions: regions}, {From: 10_001, Block: 500, Regions: regions[:2]}}
	tests := []struct {
		name        string
		k           int
		after       int64
		first, last int64
		ok          bool
	}{
		{"eu from nothing", 0, 0, 1, 1000, true},
		{"eu inside its block", 0, 499, 500, 1000, true},
		{"eu skips us and ap", 0, 1000, 3001, 4000, true},
		{"us from nothing", 1, 0, 1001, 2000, true},
		{"ap's block clipped by the fence", 2, 8000, 8001, 9000, true},
		{"ap past its last block", 2, 9000, 0, 0, false},
		{"eu's last block of epoch 1 then epoch 2", 0, 9999, 10_000, 10_000, true},
		{"eu into epoch 2", 0, 10_000, 10_001, 10_500, true},
		{"us into epoch 2", 1, 9000, 10_501, 11_000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := shareOf(epochs, tt.k)
			if tt.k == 2 {
				s.Epochs = s.Epochs[:1] // retired: only the fenced epoch
			}
			first, last, ok := s.NextOwned(tt.after)
			if first != tt.first || last != tt.last || ok != tt.ok {
				t.Fatalf("NextOwned(%d) = %d, %d, %v; want %d, %d, %v", tt.after, first, last, ok, tt.first, tt.last, tt.ok)
			}
		})
	}
}

func TestShare_NoOverflowAtTheTop(t *testing.T) {
	const top = math.MaxInt64
	regions := []string{"eu", "us"}
	epochs := []Epoch{{From: top - 2500, Block: 1000, Regions: regions}}
	eu, us := shareOf(epochs, 0), shareOf(epochs, 1)
	if first, last, ok := us.NextOwned(top - 10); ok {
		t.Fatalf("us above its last block: %d, %d", first, last)
	}
	first, last, ok := eu.NextOwned(top - 10)
	if !ok || first != top-9 || last != top {
		t.Fatalf("eu's last block: %d, %d, %v; want %d, %d", first, last, ok, top-9, int64(top))
	}
	if _, _, ok := eu.NextOwned(top); ok {
		t.Fatal("an ID above 2^63-1")
	}
	if n, bounded := eu.Runway(0); bounded {
		t.Fatalf("open epoch runway bounded: %d", n)
	}
}

func TestShare_Runway(t *testing.T) {
	regions := []string{"eu", "us", "ap"}
	epochs := []Epoch{{From: 1, To: 10_001, Block: 1000, Regions: regions}}
	for k := range regions {
		s := shareOf(epochs, k)
		for _, after := range []int64{0, 1, 999, 1000, 2500, 9999, 10_000, 20_000} {
			var want int64
			for id := after + 1; id <= 10_000; id++ {
				if owner(epochs, id) == k {
					want++
				}
			}
			if got, bounded := s.Runway(after); got != want || !bounded {
				t.Errorf("region %d Runway(%d) = %d, %v; want %d", k, after, got, bounded, want)
			}
		}
	}
}

func TestCompatible(t *testing.T) {
	regions := []string{"eu", "us"}
	open := []Epoch{{From: 1, Block: 1000, Regions: regions}}
	fenced := []Epoch{{From: 1, To: 5001, Block: 1000, Regions: regions}, {From: 5001, Block: 1000, Regions: []string{"eu", "us", "ap"}}}
	ap := Share{Name: "ap", Epochs: []Epoch{{From: 5001, Block: 1000, Regions: []string{"eu", "us", "ap"}, Index: 2}}, WorkerSlot: 2, WorkerSlots: 4}
	withSlots := func(s Share, slot int) Share { s.WorkerSlot, s.WorkerSlots = slot, 4; return s }
	tests := []struct {
		name string
		a, b Share
		ok   bool
	}{
		{"two regions of one epoch", withSlots(shareOf(open, 0), 0), withSlots(shareOf(open, 1), 1), true},
		{"one fenced, the other not yet", withSlots(shareOf(fenced[:1], 0), 0), withSlots(shareOf(open, 1), 1), true},
		{"after a split", withSlots(shareOf(fenced, 0), 0), ap, true},
		{"a new region beside an unfenced one", withSlots(shareOf(open, 0), 0), ap, false},
		{"the same index", withSlots(shareOf(open, 0), 0), Share{Name: "xx", Epochs: shareOf(open, 0).Epochs, WorkerSlot: 1, WorkerSlots: 4}, false},
		{"the same name", withSlots(shareOf(open, 0), 0), withSlots(shareOf(open, 0), 1), false},
		{"another block", withSlots(shareOf(open, 0), 0), Share{Name: "us", Epochs: []Epoch{{From: 1, Block: 999, Regions: regions, Index: 1}}, WorkerSlot: 1, WorkerSlots: 4}, false},
		{"the same worker slot", withSlots(shareOf(open, 0), 1), withSlots(shareOf(open, 1), 1), false},
		{"another slot count", withSlots(shareOf(open, 0), 0), Share{Name: "us", Epochs: shareOf(open, 1).Epochs, WorkerSlot: 1, WorkerSlots: 2}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, pair := range [][2]Share{{tt.a, tt.b}, {tt.b, tt.a}} {
				err := Compatible(pair[0], pair[1])
				if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrConflict)) {
					t.Fatalf("Compatible(%s, %s) = %v; want ok %v", pair[0].Name, pair[1].Name, err, tt.ok)
				}
			}
		})
	}
}

func TestWorkerSlice(t *testing.T) {
	const maxWorker = 1023
	var prev int64 = -1
	for slot := range 3 {
		lo, hi, ok := WorkerSlice(slot, 3, maxWorker)
		if !ok || lo != prev+1 {
			t.Fatalf("slot %d: [%d, %d] %v after %d", slot, lo, hi, ok, prev)
		}
		prev = hi
	}
	if prev != maxWorker {
		t.Fatalf("slices end at %d, not %d", prev, maxWorker)
	}
	if _, _, ok := WorkerSlice(2, 8, 3); ok {
		t.Fatal("a slice of 4 worker IDs cut in 8 is not empty for every slot")
	}
}

func TestAlignAbove(t *testing.T) {
	for _, tt := range []struct{ min, from, block, n, want int64 }{
		{0, 1, 1000, 3, 1}, {1, 1, 1000, 3, 1}, {2, 1, 1000, 3, 3001}, {3001, 1, 1000, 3, 3001}, {3002, 1, 1000, 3, 6001},
	} {
		if got, ok := AlignAbove(tt.min, tt.from, tt.block, tt.n); !ok || got != tt.want {
			t.Errorf("AlignAbove(%d, %d, %d, %d) = %d, %v; want %d", tt.min, tt.from, tt.block, tt.n, got, ok, tt.want)
		}
	}
	if _, ok := AlignAbove(math.MaxInt64-1, 1, 1<<40, 3); ok {
		t.Error("aligned above 2^63-1")
	}
}

// FuzzShares: two or more databases with the same epochs and different
// indexes never grant the same ID, every ID granted is its own by the
// definition, and a range never crosses a block's end, for any blocks,
// region counts and boundaries, near 2^63-1 too.
func FuzzShares(f *testing.F) {
	f.Add(int64(1), int64(1000), uint8(3), int64(5000), int64(700), int64(1), int64(400), uint8(2))
	f.Add(int64(math.MaxInt64-100_000), int64(7), uint8(5), int64(0), int64(3), int64(math.MaxInt64-99_000), int64(9), uint8(4))
	f.Add(int64(1), int64(1), uint8(1), int64(0), int64(1), int64(1), int64(1), uint8(1))
	f.Fuzz(func(t *testing.T, from, block int64, n uint8, span, size, from2, block2 int64, n2 uint8) {
		if from < 1 || block < 1 || size < 1 || n < 1 || n > 8 || n2 < 1 || n2 > 8 || block2 < 1 {
			t.Skip()
		}
		names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		e1 := Epoch{From: from, Block: block, Regions: names[:n]}
		epochs := []Epoch{e1}
		if span > 0 && span <= math.MaxInt64-from && from2 > from+span-1 {
			// a fenced first epoch and an open second one with other regions
			epochs[0].To = from + span
			from2 = max(from2, epochs[0].To)
			epochs = append(epochs, Epoch{From: from2, Block: block2, Regions: names[8-n2:]})
		}
		// The IDs each region was granted, near the starts of the epochs
		// and near the end of the first.
		owners := map[int64]string{}
		starts := []int64{from - 1}
		for _, e := range epochs {
			starts = append(starts, e.From-1, e.From+block*int64(n)-1, e.Last()-3*block)
		}
		for k := range 8 {
			name := names[k]
			var s Share
			for _, e := range epochs {
				if i := indexOf(e.Regions, name); i >= 0 {
					e.Index = i
					s.Epochs = append(s.Epochs, e)
				}
			}
			for _, after := range starts {
				if after < 0 {
					continue
				}
				grants(s, after, size, 30, func(first, last int64) {
					if first <= after || last < first {
						t.Fatalf("%s: range [%d, %d] after %d", name, first, last, after)
					}
					if got := owner(epochs, first); got < 0 || epochOf(epochs, first).Regions[got] != name {
						t.Fatalf("%s granted %d, owned by index %d", name, first, got)
					}
					e := epochOf(epochs, first)
					if (first-e.From)/e.Block != (last-e.From)/e.Block || last > e.Last() {
						t.Fatalf("%s: range [%d, %d] crosses a block of %s", name, first, last, e)
					}
					for _, id := range []int64{first, last, first + (last-first)/2} {
						if o, ok := owners[id]; ok && o != name {
							t.Fatalf("id %d granted by %s and %s", id, o, name)
						}
						owners[id] = name
					}
				})
			}
		}
	})
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return -1
}

func epochOf(epochs []Epoch, id int64) Epoch {
	for _, e := range epochs {
		if id >= e.From && id <= e.Last() {
			return e
		}
	}
	return Epoch{}
}

// TestGrown: what a split does to a database's share (a fence, a raised
// fence, a new epoch above it) is growth; anything else differs.
func TestGrown(t *testing.T) {
	regions := []string{"eu", "us"}
	open := []Epoch{{From: 1, Block: 1000, Regions: regions}}
	fenced := []Epoch{{From: 1, To: 5001, Block: 1000, Regions: regions}}
	raised := []Epoch{{From: 1, To: 7001, Block: 1000, Regions: regions}}
	split := append(fenced[:1:1], Epoch{From: 5001, Block: 1000, Regions: []string{"eu", "us", "ap"}})
	tests := []struct {
		name     string
		old, cur Share
		ok       bool
	}{
		{"unchanged", shareOf(open, 0), shareOf(open, 0), true},
		{"fenced", shareOf(open, 0), shareOf(fenced, 0), true},
		{"fence raised", shareOf(fenced, 0), shareOf(raised, 0), true},
		{"split", shareOf(open, 0), shareOf(split, 0), true},
		{"split after the fence", shareOf(fenced, 0), shareOf(split, 0), true},
		{"unfenced", shareOf(fenced, 0), shareOf(open, 0), false},
		{"fence lowered", shareOf(raised, 0), shareOf(fenced, 0), false},
		{"another region", shareOf(open, 0), shareOf(open, 1), false},
		{"another block", shareOf(open, 0), shareOf([]Epoch{{From: 1, Block: 999, Regions: regions}}, 0), false},
		{"an epoch gone", shareOf(split, 0), shareOf(fenced, 0), false},
		{"another worker slot", shareOf(open, 0), Share{Name: "eu", Epochs: shareOf(open, 0).Epochs, WorkerSlot: 1, WorkerSlots: 2}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Grown(tt.old, tt.cur)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrShareDiffers)) {
				t.Fatalf("Grown = %v; want ok %v", err, tt.ok)
			}
		})
	}
}
