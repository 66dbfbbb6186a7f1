package allocator

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/idmint/idmint/segment"
)

// storeSource is the allocator's segment.Source: the Store, with the
// instance's name and floor on every request, the holder rules (a range
// held by a caller is never served by an instance), replication
// confirmation (a grant not confirmed on the standbys is not served until
// a lookup confirms it), and the store's errors classified for the Set.
type storeSource struct{ a *Allocator }

var _ segment.Source = storeSource{}

// Grant allocates one segment for req.
func (g storeSource) Grant(ctx context.Context, req segment.Ask) (segment.Grant, error) {
	a := g.a
	start := a.cfg.Now()
	seg, err := a.allocate(ctx, Request{ID: req.ID, Tag: req.Tag, Size: req.Size, Instance: a.cfg.Instance, Floor: req.Floor})
	switch {
	case err == nil:
		if seg.Repaired {
			a.cfg.Logger.Error("REPAIRED rollback: the tag's max_id was below the highest id this instance was granted (restored backup or failover to a lagging replica?); raised it to that id and serving above it; ids other instances were granted above it may be handed out again: bump the tag past the old high-water mark",
				"biz_tag", req.Tag, "request_id", req.ID, "max_id_found", seg.FoundMaxID, "raised_to", req.Floor,
				"first", seg.First, "last", seg.Last, "latency", a.cfg.Now().Sub(start))
		}
		return toGrant(seg, false), nil
	case errors.Is(err, ErrAlreadyGranted):
		return segment.Grant{}, segment.Classify(segment.ErrAlreadyGranted, err)
	case errors.Is(err, ErrUnknownTag), errors.Is(err, ErrExhausted), errors.Is(err, ErrShareExhausted), errors.Is(err, ErrInvalidTag):
		return segment.Grant{}, segment.Classify(segment.ErrRefused, err)
	case errors.Is(err, ErrNotReplicated):
		// Granted, but the standbys may not have it: not served until a
		// lookup confirms it. If the primary fails first, the lookup on
		// the promoted one does not find it and the same request is sent
		// again there.
		a.cfg.Logger.Warn("segment granted but not confirmed on the standbys; not served until it is",
			"biz_tag", req.Tag, "request_id", req.ID, "err", err)
		return segment.Grant{}, segment.Classify(segment.ErrAmbiguous, err)
	case errors.Is(err, ErrAmbiguous):
		return segment.Grant{}, segment.Classify(segment.ErrAmbiguous, err)
	}
	return segment.Grant{}, err
}

// Lookup finds the segment committed for req.ID.
func (g storeSource) Lookup(ctx context.Context, req segment.Ask) (segment.Grant, error) {
	seg, err := g.a.lookup(ctx, req.ID)
	switch {
	case err == nil && !seg.Holder.IsZero(), errors.Is(err, ErrGivenBack) && !seg.Holder.IsZero():
		// A caller's range under this instance's request ID: the ID was
		// read from a log and claimed through the range API before an
		// attempt of ours committed. The range is that caller's; serving
		// it too would hand its IDs out twice. Nothing of ours committed
		// under the ID.
		return segment.Grant{}, segment.Classify(segment.ErrNotHeld,
			fmt.Errorf("request id taken by a caller's range grant (%s) before this instance's request committed", seg.Holder))
	case errors.Is(err, ErrGivenBack):
		return segment.Grant{}, segment.Classify(segment.ErrNotHeld, err)
	case err == nil:
		return toGrant(seg, true), nil
	case errors.Is(err, ErrNotFound):
		return segment.Grant{}, segment.Classify(segment.ErrNotFound, err)
	}
	return segment.Grant{}, err
}

// GiveBack gives r back to the store: only if max_id still ends it, so
// that nobody else was granted an ID above its first, and this instance,
// closing, hands out none of it. It is bounded as a caller's give-back is
// (giveBackTimeout), whatever time the close was given.
func (g storeSource) GiveBack(ctx context.Context, req segment.Ask, r segment.Range) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, g.a.giveBackTimeout())
	defer cancel()
	return g.a.cfg.Store.GiveBack(ctx, req.Tag, r.First, r.Last)
}

func (a *Allocator) allocate(ctx context.Context, req Request) (Segment, error) {
	ctx, cancel := context.WithTimeout(ctx, a.attemptTimeout())
	defer cancel()
	seg, err := a.cfg.Store.Allocate(ctx, req)
	if err == nil && (seg.RequestID != req.ID || seg.Tag != req.Tag) {
		return Segment{}, fmt.Errorf("store answered request %s for %q with %s for %q", req.ID, req.Tag, seg.RequestID, seg.Tag)
	}
	return seg, err
}

func (a *Allocator) lookup(ctx context.Context, id uuid.UUID) (Segment, error) {
	ctx, cancel := context.WithTimeout(ctx, a.attemptTimeout())
	defer cancel()
	return a.cfg.Store.Lookup(ctx, id)
}

func toGrant(seg Segment, recovered bool) segment.Grant {
	return segment.Grant{
		Range:     segment.Range{First: seg.First, Last: seg.Last},
		MinStep:   seg.Step,
		MaxStep:   seg.MaxStep,
		Runway:    seg.Runway,
		RequestID: seg.RequestID.String(),
		Recovered: recovered,
		Repaired:  seg.Repaired,
	}
}
