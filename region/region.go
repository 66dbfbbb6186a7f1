package region

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/idmint/idmint/wire"
)

// Errors of the region package.
var (
	// ErrConflict means this region's share and a peer's may overlap (or
	// the instance's region is not its database's): nothing is granted.
	ErrConflict = wire.ErrRegionConflict
	// ErrInvalid means a share or an epoch out of bounds.
	ErrInvalid = errors.New("invalid region share")
)

// Bounds of a share.
const (
	// MaxRegions bounds the regions of one epoch.
	MaxRegions = 64
	// MaxWorkerSlots bounds the slices the Snowflake worker IDs are cut in.
	MaxWorkerSlots = 1024
	// maxName is the longest region name.
	maxName = 32
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

// sameScheme reports whether e and o cut their IDs the same way.
func (e Epoch) sameScheme(o Epoch) bool {
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
	if err := ValidateName(s.Name); err != nil {
		return err
	}
	if s.WorkerSlots < 1 || s.WorkerSlots > MaxWorkerSlots || s.WorkerSlot < 0 || s.WorkerSlot >= s.WorkerSlots {
		return fmt.Errorf("%w: worker slot %d of %d: want 0 <= slot < slots <= %d", ErrInvalid, s.WorkerSlot, s.WorkerSlots, MaxWorkerSlots)
	}
	for i, e := range s.Epochs {
		if err := e.validate(); err != nil {
			return err
		}
		if e.Regions[e.Index] != s.Name {
			return fmt.Errorf("%w: epoch %s: index %d is %q, not this region %q", ErrInvalid, e, e.Index, e.Regions[e.Index], s.Name)
		}
		if i > 0 {
			prev := s.Epochs[i-1]
			if prev.Open() || prev.To > e.From {
				return fmt.Errorf("%w: epoch %s overlaps or precedes %s", ErrInvalid, e, prev)
			}
		}
	}
	return nil
}

func (e Epoch) validate() error {
	switch {
	case e.From < 1:
		return fmt.Errorf("%w: epoch from %d: want at least 1", ErrInvalid, e.From)
	case !e.Open() && e.To <= e.From:
		return fmt.Errorf("%w: epoch [%d, %d): empty", ErrInvalid, e.From, e.To)
	case e.Block < 1:
		return fmt.Errorf("%w: block %d: want at least 1", ErrInvalid, e.Block)
	case len(e.Regions) < 1 || len(e.Regions) > MaxRegions:
		return fmt.Errorf("%w: %d regions: want 1 to %d", ErrInvalid, len(e.Regions), MaxRegions)
	case e.Index < 0 || e.Index >= len(e.Regions):
		return fmt.Errorf("%w: index %d of %d regions", ErrInvalid, e.Index, len(e.Regions))
	}
	for i, name := range e.Regions {
		if err := ValidateName(name); err != nil {
			return err
		}
		if slices.Contains(e.Regions[:i], name) {
			return fmt.Errorf("%w: region %q named twice", ErrInvalid, name)
		}
	}
	return nil
}

// Compatible reports whether a and b, two regions' shares, can never grant
// the same ID nor lease the same worker ID: where an epoch of a overlaps
// one of b, both cut the IDs the same way (the same from, block and
// regions, and so different indexes), and their worker slots are
// different slots of the same count. An error wraps ErrConflict and says
// what differs.
func Compatible(a, b Share) error {
	if a.Name == b.Name {
		return fmt.Errorf("%w: both regions are named %q", ErrConflict, a.Name)
	}
	for _, ea := range a.Epochs {
		for _, eb := range b.Epochs {
			if !ea.overlaps(eb) {
				continue
			}
			if !ea.sameScheme(eb) {
				return fmt.Errorf("%w: %q's epoch %s and %q's epoch %s overlap with different blocks", ErrConflict, a.Name, ea, b.Name, eb)
			}
			if ea.Index == eb.Index {
				return fmt.Errorf("%w: %q and %q both own index %d of epoch %s", ErrConflict, a.Name, b.Name, ea.Index, ea)
			}
		}
	}
	if a.WorkerSlots != b.WorkerSlots || a.WorkerSlot == b.WorkerSlot {
		return fmt.Errorf("%w: worker slots %d of %d (%q) and %d of %d (%q) may overlap", ErrConflict,
			a.WorkerSlot, a.WorkerSlots, a.Name, b.WorkerSlot, b.WorkerSlots, b.Name)
	}
	return nil
}

// WorkerSlice is the worker IDs [lo, hi] of slot of slots, for a layout
// whose largest worker ID is maxWorker: contiguous slices of the worker-ID
// space, slot k of S getting [k*W/S, (k+1)*W/S). ok is false when the
// slice is empty (fewer worker IDs than slots).
func WorkerSlice(slot, slots int, maxWorker int64) (lo, hi int64, ok bool) {
	w := maxWorker + 1
	lo = int64(slot) * w / int64(slots)
	hi = int64(slot+1)*w/int64(slots) - 1
	return lo, hi, hi >= lo
}

// ValidateName reports whether name is a valid region name: 1 to 32 of
// a-z, 0-9 and '-', starting with a letter or a digit.
func ValidateName(name string) error {
	ok := len(name) >= 1 && len(name) <= maxName && name[0] != '-'
	for _, c := range name {
		ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	if !ok {
		return fmt.Errorf("%w: region name %q: want 1 to %d of a-z, 0-9 and '-', not starting with '-'", ErrInvalid, truncate(name), maxName)
	}
	return nil
}

// ParseRegions parses a comma-separated list of region names.
func ParseRegions(list string) ([]string, error) {
	names := strings.Split(list, ",")
	for i := range names {
		names[i] = strings.TrimSpace(names[i])
	}
	e := Epoch{From: 1, Block: 1, Regions: names}
	if err := e.validate(); err != nil {
		return nil, err
	}
	return names, nil
}

// AlignAbove is the first ID at or above min at which an epoch starting at
// from would begin a new cycle of n blocks of block IDs: the boundary a
// split fences at. ok is false when it would pass 2^63-1.
func AlignAbove(min, from, block, n int64) (int64, bool) {
	if min <= from {
		return from, true
	}
	if block > math.MaxInt64/n {
		return 0, false
	}
	cycle := block * n
	k := (min - from) / cycle
	if (min-from)%cycle != 0 {
		k++
	}
	if k > (math.MaxInt64-from)/cycle {
		return 0, false
	}
	return from + k*cycle, true
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
