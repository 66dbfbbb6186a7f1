package wire

import (
	"errors"
	"testing"
)

func TestShare_CheckRange(t *testing.T) {
	const block, x = 1000, 10_001 // x: a cycle start of two regions above 1
	old := func(name string, index, slot int) Share {
		return Share{Name: name, WorkerSlot: slot, WorkerSlots: 8,
			Epochs: []Epoch{{From: 1, Block: block, Regions: []string{"eu", "us"}, Index: index}}}
	}
	// split is s after `region split --add ap` at x: fenced, then the
	// epoch of three regions above.
	split := func(s Share, index int) Share {
		s.Epochs = append([]Epoch{s.Epochs[0]}, Epoch{From: x, Block: block, Regions: []string{"eu", "us", "ap"}, Index: index})
		s.Epochs[0].To = x
		return s
	}
	eu, us := old("eu", 0, 0), old("us", 1, 1)
	twin := old("ap", 0, 1) // claimed with eu's index and us's worker slot
	otherBlock := us
	otherBlock.Epochs = []Epoch{{From: 1, Block: 500, Regions: []string{"eu", "us"}, Index: 1}}

	for _, c := range []struct {
		name        string
		s           Share
		first, last int64
		other       Share
		ok          bool
	}{
		{"its own block, compatible", us, 1001, 1500, eu, true},
		{"a whole block", us, 1001, 2000, eu, true},
		{"not its block", us, 1, 100, eu, false},
		{"crosses its block's end", us, 1901, 2100, eu, false},
		{"empty", us, 0, 0, eu, false},
		{"the same index", twin, 1, 100, eu, false},
		{"another block size", otherBlock, 501, 600, eu, false},
		{"split, the other read before it", split(us, 1), x + block, x + block + 9, eu, true},
		{"split, read before the other's", us, 1001, 1500, split(eu, 0), true},
		{"above the split the other shows, in the old scheme", us, x + block, x + block + 9, split(eu, 0), false},
		{"split, the other read before it, its own old epoch", split(us, 1), 3001, 3100, eu, true},
		{"the same worker slot, a split apart", us, 1001, 1500, split(twin, 2), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.s.CheckRange(c.first, c.last, c.other)
			if c.ok && err != nil {
				t.Fatalf("CheckRange: %v, want nil", err)
			}
			if !c.ok && !errors.Is(err, ErrRegionConflict) {
				t.Fatalf("CheckRange: %v, want ErrRegionConflict", err)
			}
		})
	}
}
