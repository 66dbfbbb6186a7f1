package region

import (
	"errors"
	"fmt"
	"slices"
)

// Errors of the changes to a share.
var (
	// ErrShareDiffers means a database's share differs from the one a
	// command would write: a share is written once, and only extended.
	ErrShareDiffers = fmt.Errorf("%w: the database's share differs", ErrConflict)
	// ErrGranted means a tag's max_id is at or above where a share would
	// start or be fenced: IDs there may have been granted already.
	ErrGranted = errors.New("ids granted at or above the boundary")
	// ErrBlockBelowStep means a block smaller than a tag's max_step
	// (segment.DefaultMaxStep when unset): every range would be clipped.
	ErrBlockBelowStep = errors.New("block smaller than a tag's max_step")
)

// Extend returns the epochs a database whose share is have must add to
// hold want: none when it holds it already. want must be valid; have must
// be no share, or the same region and worker slot whose epochs are the
// first of want's, its last one fenced where the first added one starts
// or below. Anything else wraps ErrShareDiffers: a share is written once
// and only ever extended above a fence.
func Extend(have, want Share) ([]Epoch, error) {
	if err := want.Validate(); err != nil {
		return nil, err
	}
	if len(want.Epochs) == 0 {
		return nil, fmt.Errorf("%w: a share of no epoch", ErrInvalid)
	}
	if have.IsZero() {
		return want.Epochs, nil
	}
	if have.Name != want.Name || have.WorkerSlot != want.WorkerSlot || have.WorkerSlots != want.WorkerSlots {
		return nil, fmt.Errorf("%w: it is region %q (worker slot %d of %d), not %q (worker slot %d of %d)", ErrShareDiffers,
			have.Name, have.WorkerSlot, have.WorkerSlots, want.Name, want.WorkerSlot, want.WorkerSlots)
	}
	if len(have.Epochs) > len(want.Epochs) || !(Share{Epochs: want.Epochs[:len(have.Epochs)]}).Equal(Share{Epochs: have.Epochs}) {
		return nil, fmt.Errorf("%w: its epochs %v are not the first of %v", ErrShareDiffers, have.Epochs, want.Epochs)
	}
	return want.Epochs[len(have.Epochs):], nil
}

// Fence returns have with its open epoch ended at at (To = at), and
// whether that changed it: a share fenced at at already is returned as it
// is. With raise, a last epoch fenced below at is moved up to at: safe only
// while no database has an epoch starting at the old fence (a split's
// phase 1, retried higher because grants passed the first boundary). A
// share fenced elsewhere otherwise, one whose open epoch starts at or above
// at, and no share at all are refused.
func Fence(have Share, at int64, raise bool) (Share, bool, error) {
	if len(have.Epochs) == 0 {
		return Share{}, false, fmt.Errorf("%w: no share to fence", ErrInvalid)
	}
	last := &have.Epochs[len(have.Epochs)-1]
	switch {
	case last.To == at:
		return have, false, nil
	case !last.Open() && (!raise || at < last.To):
		return Share{}, false, fmt.Errorf("%w: region %q is fenced at %d already, not at %d", ErrShareDiffers, have.Name, last.To, at)
	case at <= last.From:
		return Share{}, false, fmt.Errorf("%w: fence at %d: region %q's open epoch starts at %d", ErrInvalid, at, have.Name, last.From)
	}
	fenced := have
	fenced.Epochs = slices.Clone(have.Epochs)
	fenced.Epochs[len(fenced.Epochs)-1].To = at
	return fenced, true, nil
}

// Bounds are what a database's tags have granted and may grant in one
// range: the highest max_id of every tag and the largest max_step (the
// default one where a tag has none). A store reads them in the
// transaction, under the lock, that changes its share.
type Bounds struct {
	MaxID, MaxStep int64
}

// CheckAdded refuses added epochs (Extend's) that start at or below b's
// max_id (ErrGranted: IDs there may be granted already, in the old scheme)
// or whose block is smaller than b's max_step (ErrBlockBelowStep).
func (b Bounds) CheckAdded(added []Epoch) error {
	for _, e := range added {
		if b.MaxID >= e.From {
			return fmt.Errorf("%w: epoch %s starts at or below a tag's max_id %d: start it above (--from, --at)", ErrGranted, e, b.MaxID)
		}
		if e.Block < b.MaxStep {
			return fmt.Errorf("%w: epoch %s: a tag's max_step is %d", ErrBlockBelowStep, e, b.MaxStep)
		}
	}
	return nil
}

// CheckFence refuses a fence at at when a tag's max_id is at or above it
// (ErrGranted): the IDs from at up may be granted already.
func (b Bounds) CheckFence(at int64) error {
	if b.MaxID >= at {
		return fmt.Errorf("%w: a tag's max_id %d is at or above the fence %d", ErrGranted, b.MaxID, at)
	}
	return nil
}

// BlockFits refuses a tag's max_step above block, the smallest block of
// a share (0: no share), with ErrBlockBelowStep: its ranges would be
// clipped at every block's end.
func BlockFits(block, maxStep int64) error {
	if block > 0 && maxStep > block {
		return fmt.Errorf("%w: max_step %d above the region's block %d", ErrBlockBelowStep, maxStep, block)
	}
	return nil
}

// Grown reports whether cur can be what a database whose share was old
// holds now: the same region and worker slot, old's epochs first with the
// same blocks, regions and index, each as fenced as before (an open one
// maybe fenced since, the last one's fence maybe raised, as a split's phase
// 1 does), maybe more epochs above. Anything else wraps ErrShareDiffers: a
// share is written once and only extended.
func Grown(old, cur Share) error {
	if err := cur.Validate(); err != nil {
		return err
	}
	if old.Name != cur.Name || old.WorkerSlot != cur.WorkerSlot || old.WorkerSlots != cur.WorkerSlots || len(cur.Epochs) < len(old.Epochs) {
		return fmt.Errorf("%w: it was region %q (worker slot %d of %d) with epochs %v, it is %q (worker slot %d of %d) with %v", ErrShareDiffers,
			old.Name, old.WorkerSlot, old.WorkerSlots, old.Epochs, cur.Name, cur.WorkerSlot, cur.WorkerSlots, cur.Epochs)
	}
	for i, e := range old.Epochs {
		c := cur.Epochs[i]
		raised := i == len(old.Epochs)-1 && !e.Open() && !c.Open() && c.To > e.To
		if !e.SameScheme(c) || e.Index != c.Index || (e.To != c.To && !e.Open() && !raised) {
			return fmt.Errorf("%w: its epoch %s is now %s", ErrShareDiffers, e, c)
		}
	}
	return nil
}
