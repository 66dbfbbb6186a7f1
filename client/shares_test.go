package client

import (
	"errors"
	"testing"

	"github.com/idmint/idmint/wire"
)

// TestShares_Check: with several regions, a range is served only with its
// own region's share, which owns it and agrees with the others'; the
// first disagreement stays.
func TestShares_Check(t *testing.T) {
	regions := []*region{{name: "a", index: 0}, {name: "b", index: 1}}
	share := func(name string, index int) *wire.Share {
		return &wire.Share{Name: name, WorkerSlot: index, WorkerSlots: 8,
			Epochs: []wire.Epoch{{From: 1, Block: 100, Regions: []string{"a", "b"}, Index: index}}}
	}
	for _, c := range []struct {
		name        string
		from        *region
		first, last int64
		share       *wire.Share
	}{
		{"no share", regions[1], 101, 200, nil},
		{"another region's share", regions[1], 1, 100, share("a", 0)},
		{"outside its share", regions[1], 1, 100, share("b", 1)},
		{"overlapping a's", regions[1], 1, 100, &wire.Share{Name: "b", WorkerSlot: 1, WorkerSlots: 8,
			Epochs: []wire.Epoch{{From: 1, Block: 100, Regions: []string{"b", "a"}, Index: 0}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sh := shares{last: map[int]wire.Share{}}
			if err := sh.check(regions, regions[0], 1, 100, share("a", 0)); err != nil {
				t.Fatalf("a's own range: %v", err)
			}
			err := sh.check(regions, c.from, c.first, c.last, c.share)
			if !errors.Is(err, ErrSharesOverlap) {
				t.Fatalf("check: %v, want ErrSharesOverlap", err)
			}
			if err := sh.check(regions, regions[0], 201, 300, share("a", 0)); !errors.Is(err, ErrSharesOverlap) {
				t.Fatalf("a range after the conflict: %v, want the conflict again", err)
			}
		})
	}
	// The first range of all, from b with a's share: b's URLs reach a.
	sh := shares{last: map[int]wire.Share{}}
	if err := sh.check(regions, regions[1], 1, 100, share("a", 0)); !errors.Is(err, ErrSharesOverlap) {
		t.Fatalf("b's first range with a's share: %v, want ErrSharesOverlap", err)
	}

	sh = shares{last: map[int]wire.Share{}}
	for _, r := range []struct {
		from        *region
		first, last int64
		share       *wire.Share
	}{{regions[0], 1, 100, share("a", 0)}, {regions[1], 101, 200, share("b", 1)}, {regions[0], 201, 250, share("a", 0)}} {
		if err := sh.check(regions, r.from, r.first, r.last, r.share); err != nil {
			t.Fatalf("region %s's range [%d, %d]: %v", r.from.name, r.first, r.last, err)
		}
	}
	// One region: nothing to compare, whatever the reply carries.
	if err := sh.check(regions[:1], regions[0], 101, 200, nil); err != nil {
		t.Fatalf("a single region: %v", err)
	}
}
