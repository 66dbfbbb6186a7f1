package region

import (
	"math"
	"strings"

	"github.com/idmint/idmint/wire"
)

// The share's types and arithmetic live in the wire module (wire.Share),
// so that the Go client checks the shares regions report with the code
// the instances run; region names them for the server's packages.
type (
	// Epoch is one epoch of a share (wire.Epoch).
	Epoch = wire.Epoch
	// Share is what one region's database owns (wire.Share).
	Share = wire.Share
)

// Errors of a share.
var (
	// ErrConflict means this region's share and a peer's may overlap (or
	// the instance's region is not its database's): nothing is granted.
	ErrConflict = wire.ErrRegionConflict
	// ErrInvalid means a share or an epoch out of bounds.
	ErrInvalid = wire.ErrInvalidShare
)

// Bounds of a share.
const (
	MaxRegions     = wire.MaxRegions
	MaxWorkerSlots = wire.MaxWorkerSlots
)

// Compatible reports whether a and b, two regions' shares, can never grant
// the same ID nor lease the same worker ID (wire.Share.Compatible).
func Compatible(a, b Share) error { return a.Compatible(b) }

// ValidateName reports whether name is a valid region name
// (wire.ValidateRegionName).
func ValidateName(name string) error { return wire.ValidateRegionName(name) }

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

// ParseRegions parses a comma-separated list of region names.
func ParseRegions(list string) ([]string, error) {
	names := strings.Split(list, ",")
	for i := range names {
		names[i] = strings.TrimSpace(names[i])
	}
	e := Epoch{From: 1, Block: 1, Regions: names}
	if err := e.Validate(); err != nil {
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
