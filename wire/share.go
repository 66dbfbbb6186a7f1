package wire

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// ErrInvalidShare means a share or an epoch out of bounds.
var ErrInvalidShare = errors.New("invalid region share")

// Bounds of a share.
const (
	// MaxRegions bounds the regions of one epoch.
	MaxRegions = 64
	// MaxWorkerSlots bounds the slices the Snowflake worker IDs are cut in.
	MaxWorkerSlots = 1024
	// maxRegionName is the longest region name.
	maxRegionName = 32
)

// Epoch is one epoch of a share as one database records it: the IDs
// [From, To) cut into blocks of Block, block j owned by Regions[j mod N];
// this database is Regions[Index].
type Epoch struct {
	From  int64 `json:"from,string"`
	To    int64 `json:"to,string"` // first ID after the epoch; 0: open, up to 2^63-1
	Block int64 `json:"block,string"`
	// Regions names the regions in block order; Index is this database's.
	Regions []string `json:"regions"`
	Index   int      `json:"index"`
}

// Open reports whether the epoch has no end.
func (e Epoch) Open() bool { return e.To == 0 }

// Last is the epoch's last ID.
func (e Epoch) Last() int64 {
	if e.Open() {
		return math.MaxInt64
	}
	return e.To - 1
}

// N is the epoch's region count.
func (e Epoch) N() int64 { return int64(len(e.Regions)) }

// Owner is the index of the region that owns id, which must lie in e.
func (e Epoch) Owner(id int64) int { return int((id - e.From) / e.Block % e.N()) }

// SameScheme reports whether e and o cut their IDs the same way.
func (e Epoch) SameScheme(o Epoch) bool {
	return e.From == o.From && e.Block == o.Block && slices.Equal(e.Regions, o.Regions)
}

// overlaps reports whether e and o share an ID.
func (e Epoch) overlaps(o Epoch) bool { return e.From <= o.Last() && o.From <= e.Last() }

// String is "[from, to) block B eu,us,ap #k".
func (e Epoch) String() string {
	to := "∞"
	if !e.Open() {
		to = fmt.Sprint(e.To)
	}
	return fmt.Sprintf("[%d, %s) block %d %s #%d", e.From, to, e.Block, strings.Join(e.Regions, ","), e.Index)
}

// nextOwned is the first ID above after that e's region Index owns, and
// the last ID of its block (within e): ok false when there is none.
func (e Epoch) nextOwned(after int64) (first, last int64, ok bool) {
	if after >= e.Last() {
		return 0, 0, false
	}
	q := max(after+1, e.From)
	j := (q - e.From) / e.Block
	n := e.N()
	if d := (int64(e.Index) - j%n + n) % n; d > 0 {
		if j > (e.Last()-e.From)/e.Block-d {
			return 0, 0, false // the next owned block starts past the epoch
		}
		j += d
		q = e.From + j*e.Block
	}
	start := e.From + j*e.Block
	last = e.Last()
	if start <= last-(e.Block-1) {
		last = start + e.Block - 1
	}
	return q, last, true
}

// ownedUpTo counts the IDs in [From, x] that region Index owns (x >= From-1).
func (e Epoch) ownedUpTo(x int64) int64 {
	if x < e.From {
		return 0
	}
	off := x - e.From + 1 // IDs in [From, x]: at most 2^63-1
	full, rem := off/e.Block, off%e.Block
	n := e.N()
	blocks := full / n
	if full%n > int64(e.Index) {
		blocks++
	}
	owned := blocks * e.Block // at most off
	if full%n == int64(e.Index) {
		owned += rem
	}
	return owned
}

// Share is what one region's database owns: its name, its epochs (sorted,
// disjoint, only the last open) and its slice of the Snowflake worker IDs.
type Share struct {
	Name   string  `json:"name"`
	Epochs []Epoch `json:"epochs"`
	// WorkerSlot is this region's slice of the worker IDs, of WorkerSlots
	// (see WorkerSlice).
	WorkerSlot  int `json:"worker_slot"`
	WorkerSlots int `json:"worker_slots"`
}

// NextOwned returns the first ID above after that the share owns and the
// last ID of its block: a grant starting at first ends at last at the
// latest. ok is false when the share owns nothing above after: a fence.
func (s Share) NextOwned(after int64) (first, last int64, ok bool) {
	for _, e := range s.Epochs {
		if first, last, ok = e.nextOwned(after); ok {
			return first, last, true
		}
	}
	return 0, 0, false
}

// Owns reports whether the share owns id.
func (s Share) Owns(id int64) bool {
	if id < 1 {
		return false
	}
	first, _, ok := s.NextOwned(id - 1)
	return ok && first == id
}

// Runway is how many IDs the share owns above after: unbounded (false)
// when its last epoch is open.
func (s Share) Runway(after int64) (n int64, bounded bool) {
	if len(s.Epochs) == 0 || s.Epochs[len(s.Epochs)-1].Open() {
		return 0, false
	}
	for _, e := range s.Epochs {
		if after >= e.Last() {
			continue
		}
		lo := max(after, e.From-1)
		left := e.ownedUpTo(e.Last()) - e.ownedUpTo(lo)
		if n > math.MaxInt64-left {
			return math.MaxInt64, true
		}
		n += left
	}
	return n, true
}

// Fence is the end of the share: the first ID above its last epoch (0
// when that is open).
func (s Share) Fence() int64 {
	if len(s.Epochs) == 0 {
		return 0
	}
	return s.Epochs[len(s.Epochs)-1].To
}

// Current is the share's epoch that holds after+1, or the next one; nil
// when none is left.
func (s Share) Current(after int64) *Epoch {
	for i := range s.Epochs {
		if after < s.Epochs[i].Last() {
			return &s.Epochs[i]
		}
	}
	return nil
}

// MinBlock is the smallest block of the share's epochs (0 without any).
func (s Share) MinBlock() int64 {
	var b int64
	for _, e := range s.Epochs {
		if b == 0 || e.Block < b {
			b = e.Block
		}
	}
	return b
}

// Validate checks s: a valid name; epochs sorted and disjoint, each with a
// block of at least 1, at most MaxRegions distinct valid region names
// among which s.Name is the one at Index; only the last epoch open; a
// worker slot within 1 to MaxWorkerSlots slots.
func (s Share) Validate() error {
	if err := ValidateRegionName(s.Name); err != nil {
		return err
	}
	if s.WorkerSlots < 1 || s.WorkerSlots > MaxWorkerSlots || s.WorkerSlot < 0 || s.WorkerSlot >= s.WorkerSlots {
		return fmt.Errorf("%w: worker slot %d of %d: want 0 <= slot < slots <= %d", ErrInvalidShare, s.WorkerSlot, s.WorkerSlots, MaxWorkerSlots)
	}
	for i, e := range s.Epochs {
		if err := e.Validate(); err != nil {
			return err
		}
		if e.Regions[e.Index] != s.Name {
			return fmt.Errorf("%w: epoch %s: index %d is %q, not this region %q", ErrInvalidShare, e, e.Index, e.Regions[e.Index], s.Name)
		}
		if i > 0 {
			prev := s.Epochs[i-1]
			if prev.Open() || prev.To > e.From {
				return fmt.Errorf("%w: epoch %s overlaps or precedes %s", ErrInvalidShare, e, prev)
			}
		}
	}
	return nil
}

func (e Epoch) Validate() error {
	switch {
	case e.From < 1:
		return fmt.Errorf("%w: epoch from %d: want at least 1", ErrInvalidShare, e.From)
	case !e.Open() && e.To <= e.From:
		return fmt.Errorf("%w: epoch [%d, %d): empty", ErrInvalidShare, e.From, e.To)
	case e.Block < 1:
		return fmt.Errorf("%w: block %d: want at least 1", ErrInvalidShare, e.Block)
	case len(e.Regions) < 1 || len(e.Regions) > MaxRegions:
		return fmt.Errorf("%w: %d regions: want 1 to %d", ErrInvalidShare, len(e.Regions), MaxRegions)
	case e.Index < 0 || e.Index >= len(e.Regions):
		return fmt.Errorf("%w: index %d of %d regions", ErrInvalidShare, e.Index, len(e.Regions))
	}
	for i, name := range e.Regions {
		if err := ValidateRegionName(name); err != nil {
			return err
		}
		if slices.Contains(e.Regions[:i], name) {
			return fmt.Errorf("%w: region %q named twice", ErrInvalidShare, name)
		}
	}
	return nil
}

// Compatible reports whether s and o, two regions' shares, can never grant
// the same ID nor lease the same worker ID: where an epoch of s overlaps
// one of o, both cut the IDs the same way (the same from, block and
// regions, and so different indexes), and their worker slots are
// different slots of the same count. An error wraps ErrRegionConflict and says
// what differs.
func (s Share) Compatible(o Share) error {
	if s.Name == o.Name {
		return fmt.Errorf("%w: both regions are named %q", ErrRegionConflict, s.Name)
	}
	for _, ea := range s.Epochs {
		for _, eb := range o.Epochs {
			if !ea.overlaps(eb) {
				continue
			}
			if !ea.SameScheme(eb) {
				return fmt.Errorf("%w: %q's epoch %s and %q's epoch %s overlap with different blocks", ErrRegionConflict, s.Name, ea, o.Name, eb)
			}
			if ea.Index == eb.Index {
				return fmt.Errorf("%w: %q and %q both own index %d of epoch %s", ErrRegionConflict, s.Name, o.Name, ea.Index, ea)
			}
		}
	}
	if s.WorkerSlots != o.WorkerSlots || s.WorkerSlot == o.WorkerSlot {
		return fmt.Errorf("%w: worker slots %d of %d (%q) and %d of %d (%q) may overlap", ErrRegionConflict,
			s.WorkerSlot, s.WorkerSlots, s.Name, o.WorkerSlot, o.WorkerSlots, o.Name)
	}
	return nil
}

// ValidateRegionName reports whether name is a valid region name: 1 to 32 of
// a-z, 0-9 and '-', starting with a letter or a digit.
func ValidateRegionName(name string) error {
	ok := len(name) >= 1 && len(name) <= maxRegionName && name[0] != '-'
	for _, c := range name {
		ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	if !ok {
		return fmt.Errorf("%w: region name %q: want 1 to %d of a-z, 0-9 and '-', not starting with '-'", ErrInvalidShare, truncate(name), maxRegionName)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// IsZero reports whether s is no share: a single-region database.
func (s Share) IsZero() bool { return s.Name == "" && len(s.Epochs) == 0 }

// Equal reports whether s and o are the same share.
func (s Share) Equal(o Share) bool {
	return s.Name == o.Name && s.WorkerSlot == o.WorkerSlot && s.WorkerSlots == o.WorkerSlots &&
		slices.EqualFunc(s.Epochs, o.Epochs, func(a, b Epoch) bool { return a.SameScheme(b) && a.To == b.To && a.Index == b.Index })
}

// CheckRange reports whether [first, last], granted by the region whose
// share is s, can hold no ID that the region whose share is other may
// grant: s owns the whole range, and s and other are Compatible, or are
// once the open last epoch of one is fenced where the other's next epoch
// starts. That is a split one of the two shares was read before (a client
// read other long ago, or an instance's share lags its database by a
// moment): a split fences every region's open epoch before any region gets
// the epoch above, and nothing granted before the fence lies above it. So
// a range of s above such a fence of s is a conflict: s's database did not
// take the split. An error wraps ErrRegionConflict.
func (s Share) CheckRange(first, last int64, other Share) error {
	if first < 1 || last < first {
		return fmt.Errorf("%w: range [%d, %d] of %q is empty", ErrRegionConflict, first, last, s.Name)
	}
	if !s.OwnsRange(first, last) {
		return fmt.Errorf("%w: range [%d, %d] is not in %q's share %v", ErrRegionConflict, first, last, s.Name, s.Epochs)
	}
	err := s.Compatible(other)
	if err == nil {
		return nil
	}
	fs, fo := s.fencedAtSplit(other), other.fencedAtSplit(s)
	if fs.Compatible(fo) != nil {
		return err
	}
	if !fs.OwnsRange(first, last) {
		return fmt.Errorf("%w: range [%d, %d] of %q is above the split at %d that %q shows", ErrRegionConflict, first, last, s.Name, fs.Fence(), other.Name)
	}
	return nil
}

// OwnsRange reports whether s owns every ID of [first, last]: a range
// never crosses a block, so its first ID's block holds it all.
func (s Share) OwnsRange(first, last int64) bool {
	f, end, ok := s.NextOwned(first - 1)
	return ok && f == first && last <= end
}

// fencedAtSplit is s with its open last epoch fenced at the first epoch of
// o that starts above it, as a split would have fenced it; s itself when
// its last epoch is fenced or o has no such epoch.
func (s Share) fencedAtSplit(o Share) Share {
	if len(s.Epochs) == 0 || !s.Epochs[len(s.Epochs)-1].Open() {
		return s
	}
	last := s.Epochs[len(s.Epochs)-1]
	for _, e := range o.Epochs {
		if e.From > last.From {
			fenced := s
			fenced.Epochs = slices.Clone(s.Epochs)
			fenced.Epochs[len(fenced.Epochs)-1].To = e.From
			return fenced
		}
	}
	return s
}
