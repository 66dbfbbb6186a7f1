package region

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Database is one region's database as the commands see it: the
// postgres and sqlite stores are ones.
type Database interface {
	// Share returns the database's share (the zero Share: none).
	Share(ctx context.Context) (Share, error)
	// WriteShare writes the share, or extends it (Extend), refusing new
	// epochs at or below a tag's max_id (ErrGranted).
	WriteShare(ctx context.Context, s Share) error
	// FenceShare ends the open epoch at at (Fence; raise moves a fence
	// below at up to it), refusing when a tag's max_id is at or above it
	// (ErrGranted).
	FenceShare(ctx context.Context, at int64, raise bool) (Share, error)
	// HighestMaxID is the highest max_id of the tags.
	HighestMaxID(ctx context.Context) (int64, error)
}

// Claim is `idmint region claim`: the share of region name of regions,
// from from in blocks of block, with the worker slot of its index of
// max(slots, len(regions)).
func Claim(name string, regions []string, from, block int64, slots int) (Share, error) {
	i := slices.Index(regions, name)
	if i < 0 {
		return Share{}, fmt.Errorf("%w: region %q is not one of %v", ErrInvalid, name, regions)
	}
	s := Share{Name: name, WorkerSlot: i, WorkerSlots: max(slots, len(regions)),
		Epochs: []Epoch{{From: from, Block: block, Regions: regions, Index: i}}}
	return s, s.Validate()
}

// SplitPlan is a split of a deployment: a region added or retired above a
// boundary.
type SplitPlan struct {
	// Add names a region to add (its database has no share yet), Retire
	// one to retire; exactly one of them.
	Add, Retire string
	// At is the boundary: 0 picks one (AlignAbove) above every database's
	// highest max_id plus Margin, or resumes the split under way.
	At int64
	// Margin is how far above the highest max_id the boundary lies at
	// least (negative: one cycle of the epoch's blocks).
	Margin int64
}

// SplitResult is what a split did.
type SplitResult struct {
	At      int64
	Epoch   Epoch // the new epoch, with the index of its first region
	Resumed bool  // an interrupted split was found and completed
	Shares  []Share
}

// Split runs plan over dbs, every region's database (the new region's
// too, with no share yet): phase 1 fences every database's open epoch at
// the boundary, refusing where a tag's max_id is at or above it already;
// phase 2 writes the new epoch [boundary, ∞) with the new region list in
// every database but a retired one's. A database fenced and not yet given
// the new epoch grants nothing at or above the boundary (a gap, never a
// duplicate); run again, Split finds the boundary in the shares and
// completes it.
func Split(ctx context.Context, dbs []Database, plan SplitPlan) (SplitResult, error) {
	if (plan.Add == "") == (plan.Retire == "") {
		return SplitResult{}, fmt.Errorf("%w: a split adds a region or retires one", ErrInvalid)
	}
	shares := make([]Share, len(dbs))
	for i, db := range dbs {
		s, err := db.Share(ctx)
		if err != nil {
			return SplitResult{}, err
		}
		shares[i] = s
	}
	old, next, at, resumed, err := planSplit(shares, plan)
	if err != nil {
		return SplitResult{}, err
	}
	// The boundary may move up while no database has an epoch from it: the
	// first fences of phase 1 (or of an interrupted run of it) only.
	movable := plan.At == 0 && !slices.ContainsFunc(shares, func(s Share) bool { return hasEpochAt(s, at) && at != 0 })
	margin := plan.Margin
	if margin < 0 {
		margin = math.MaxInt64 / 4
		if old.Block <= margin/old.N() {
			margin = old.Block * old.N()
		}
	}
	if at == 0 {
		if at, err = boundary(ctx, dbs, old, margin); err != nil {
			return SplitResult{}, err
		}
	}
	if at <= old.From {
		return SplitResult{}, fmt.Errorf("%w: boundary %d at or below the epoch's start %d", ErrInvalid, at, old.From)
	}
	// Phase 1: fence every database that has the old epoch open. Grants
	// that passed the boundary meanwhile refuse the fence: while it may
	// move, it moves up above them, with twice the margin, a few times.
	for attempt := 0; ; attempt++ {
		err = fenceAll(ctx, dbs, shares, at, movable && (attempt > 0 || resumed))
		if err == nil || !movable || !errors.Is(err, ErrGranted) || attempt == 4 {
			break
		}
		margin = min(2*max(margin, old.Block), math.MaxInt64/4)
		higher, berr := boundary(ctx, dbs, old, margin)
		if berr != nil {
			return SplitResult{}, berr
		}
		at = max(higher, at)
	}
	if err != nil {
		return SplitResult{}, err
	}
	next.From = at
	// The new region's worker slot: the lowest no database holds.
	slots := 0
	var used []int
	for _, s := range shares {
		if !s.IsZero() {
			slots = s.WorkerSlots
			used = append(used, s.WorkerSlot)
		}
	}
	// Phase 2: the new epoch everywhere but in a retired region.
	for i, db := range dbs {
		s := shares[i]
		if s.Name == plan.Retire && !s.IsZero() {
			continue
		}
		want := s
		if s.IsZero() {
			slot := 0
			for slices.Contains(used, slot) {
				slot++
			}
			if slot >= slots {
				return SplitResult{}, fmt.Errorf("%w: no Snowflake worker slot left for %q: all %d are taken (claim with a larger --worker-slots)", ErrInvalid, plan.Add, slots)
			}
			want = Share{Name: plan.Add, WorkerSlot: slot, WorkerSlots: slots}
			used = append(used, slot)
		}
		e := next
		e.Index = slices.Index(e.Regions, want.Name)
		if !hasEpochAt(want, at) {
			want.Epochs = append(slices.Clone(want.Epochs), e)
		}
		if err := db.WriteShare(ctx, want); err != nil {
			return SplitResult{}, fmt.Errorf("phase 2 (epoch from %d), region %q: %w", at, want.Name, err)
		}
		shares[i] = want
	}
	return SplitResult{At: at, Epoch: next, Resumed: resumed, Shares: shares}, nil
}

// boundary is the first cycle start of old above every database's highest
// max_id plus margin.
func boundary(ctx context.Context, dbs []Database, old Epoch, margin int64) (int64, error) {
	var highest int64
	for _, db := range dbs {
		h, err := db.HighestMaxID(ctx)
		if err != nil {
			return 0, err
		}
		highest = max(highest, h)
	}
	if highest > math.MaxInt64-margin-1 {
		return 0, fmt.Errorf("%w: no boundary above max_id %d", ErrInvalid, highest)
	}
	at, ok := AlignAbove(highest+margin+1, old.From, old.Block, old.N())
	if !ok {
		return 0, fmt.Errorf("%w: no boundary above max_id %d", ErrInvalid, highest)
	}
	return at, nil
}

// fenceAll is phase 1: every database with the old epoch open (or, with
// raise, fenced below at) fenced at at; shares are updated.
func fenceAll(ctx context.Context, dbs []Database, shares []Share, at int64, raise bool) error {
	for i, db := range dbs {
		s := shares[i]
		if s.IsZero() || hasEpochAt(s, at) {
			continue
		}
		fenced, err := db.FenceShare(ctx, at, raise)
		if err != nil {
			return fmt.Errorf("phase 1 (fence at %d), region %q: %w", at, s.Name, err)
		}
		shares[i] = fenced
	}
	return nil
}

func hasEpochAt(s Share, at int64) bool {
	return slices.ContainsFunc(s.Epochs, func(e Epoch) bool { return e.From == at })
}

// planSplit finds, in the shares of every database, the epoch a split
// cuts (old) and the new one (next, without From and Index), and the
// boundary of a split under way (0: none found).
func planSplit(shares []Share, plan SplitPlan) (old, next Epoch, at int64, resumed bool, err error) {
	// The schemes in the shares, by start.
	var schemes []Epoch
	names := map[string]bool{}
	fresh := 0
	for _, s := range shares {
		if s.IsZero() {
			fresh++
			continue
		}
		if names[s.Name] {
			return old, next, 0, false, fmt.Errorf("%w: two databases of region %q", ErrInvalid, s.Name)
		}
		names[s.Name] = true
		for _, e := range s.Epochs {
			if !slices.ContainsFunc(schemes, func(o Epoch) bool { return o.From == e.From }) {
				schemes = append(schemes, e)
			}
		}
	}
	if len(schemes) == 0 {
		return old, next, 0, false, fmt.Errorf("%w: no database has a share: claim them first", ErrInvalid)
	}
	slices.SortFunc(schemes, func(a, b Epoch) int { return cmpInt(a.From, b.From) })
	top := schemes[len(schemes)-1]
	apply := func(regions []string) ([]string, error) {
		switch {
		case plan.Add != "":
			if err := ValidateName(plan.Add); err != nil {
				return nil, err
			}
			if slices.Contains(regions, plan.Add) {
				return nil, fmt.Errorf("%w: region %q is there already", ErrInvalid, plan.Add)
			}
			return append(slices.Clone(regions), plan.Add), nil
		case !slices.Contains(regions, plan.Retire):
			return nil, fmt.Errorf("%w: no region %q to retire", ErrInvalid, plan.Retire)
		case len(regions) == 1:
			return nil, fmt.Errorf("%w: %q is the last region", ErrInvalid, plan.Retire)
		}
		return slices.DeleteFunc(slices.Clone(regions), func(r string) bool { return r == plan.Retire }), nil
	}
	old = top
	// A split under way: the top epoch fenced somewhere with nothing above,
	// or a top epoch that is this split's result over the one before.
	for _, s := range shares {
		if n := len(s.Epochs); n > 0 && s.Epochs[n-1].From == top.From && !s.Epochs[n-1].Open() {
			at = s.Epochs[n-1].To
		}
	}
	if at == 0 && len(schemes) > 1 {
		prev := schemes[len(schemes)-2]
		if want, err := apply(prev.Regions); err == nil && slices.Equal(want, top.Regions) {
			old, at = prev, top.From
		}
	}
	if at != 0 {
		resumed = true
		if plan.At != 0 && plan.At != at {
			return old, next, 0, false, fmt.Errorf("%w: a split at %d is under way: run it again without --at, or with --at %d", ErrInvalid, at, at)
		}
	} else {
		at = plan.At
	}
	regions, err := apply(old.Regions)
	if err != nil {
		return old, next, 0, false, err
	}
	// Every region of the old epoch and, when adding, the new one's
	// database with no share: the fence must reach every database that
	// could grant above it.
	for _, r := range old.Regions {
		if !names[r] {
			return old, next, 0, false, fmt.Errorf("%w: region %q's database is not given: every region's database must be fenced", ErrInvalid, r)
		}
	}
	switch {
	case plan.Add != "" && !names[plan.Add] && fresh != 1:
		return old, next, 0, false, fmt.Errorf("%w: adding %q needs its database, with no share, among the databases (%d without a share given)", ErrInvalid, plan.Add, fresh)
	case (plan.Add == "" || names[plan.Add]) && fresh != 0:
		return old, next, 0, false, fmt.Errorf("%w: %d database(s) without a share given", ErrInvalid, fresh)
	}
	return old, Epoch{Block: old.Block, To: 0, Regions: regions}, at, resumed, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
