package allocator

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/idmint/idmint/wire"
)

// ErrRequestConflict means a caller's request ID was already granted, for
// another tag: request IDs must be unique, whatever the tag.
var ErrRequestConflict = wire.ErrRequestConflict

// clientSuffix marks the ranges granted to callers in the segment log's
// instance column: "<instance>/client".
const clientSuffix = "/client"

// RangeRequest asks for a caller's range (GrantRange).
type RangeRequest struct {
	// ID is the caller's idempotency key, chosen before its first attempt
	// and reused on every retry, through any instance. It is logged and may
	// be seen by others: it proves nothing by itself.
	ID  uuid.UUID
	Tag string
	// Size is the wanted size; 0 means the tag's step. The store bounds it
	// by step and max_step.
	Size int64
	// Holder is who asks: the caller's principal and the hash of the
	// secret holder key it chose with ID and reuses with it. Required.
	Holder Holder
	// Floor is the highest ID the caller says it was granted for the tag
	// (0: none), untrusted: the store raises max_id to it, by at most
	// MaxLead (see Request.ClaimedFloor), so that a database that went back
	// in time grants the caller a range it can serve instead of one it
	// refuses.
	Floor int64
	// MaxLead is how far Floor may raise the tag's max_id in this grant:
	// what the caller's budget holds (at most MaxClaimedLead; 0: nothing).
	// The Segment's Lead is what it took, for the caller to be charged. A
	// Floor above max_id with no lead is refused (ErrFloorBudget), and
	// grants nothing.
	MaxLead int64
}

// GrantRange grants a range of req.Tag straight from the store to a caller
// that holds it in its own buffer (the client package). The store grants
// req.ID once; a retry by the same holder gets the same range back
// (recovered is then true), without the tail it gave back since, and
// ErrGivenBack when it gave back all of it. A retry by anyone else (another
// principal, another holder key, or any caller presenting an instance's own
// request ID) is ErrNotHolder and gets nothing.
//
// The range is the caller's alone: the allocator never serves IDs from it,
// and it does not raise the tag's floor here. The request carries that
// floor, so a database that went back in time below the IDs this instance
// was granted is raised to it (and the repair logged) before the caller's
// range is granted above it. The caller's own r.Floor raises max_id by at
// most r.MaxLead (seg.Lead says by how much); with none, a Floor above
// max_id is ErrFloorBudget and nothing is granted.
//
// Errors after which the caller should retry with the same ID wrap
// ErrUnavailable.
func (a *Allocator) GrantRange(ctx context.Context, r RangeRequest) (seg Segment, recovered bool, err error) {
	tag, id := r.Tag, r.ID
	if err := a.checkRange(tag, id); err != nil {
		return Segment{}, false, err
	}
	if r.Size < 0 || r.Floor < 0 || r.MaxLead < 0 {
		return Segment{}, false, fmt.Errorf("size %d, floor %d, lead %d: must not be negative", r.Size, r.Floor, r.MaxLead)
	}
	if r.Holder.IsZero() {
		return Segment{}, false, errors.New("a caller's range needs a holder")
	}
	floor := a.set.Floor(tag)
	req := Request{ID: id, Tag: tag, Size: r.Size, Instance: a.cfg.Instance + clientSuffix, Floor: floor,
		ClaimedFloor: r.Floor, MaxLead: r.MaxLead, Holder: r.Holder}
	seg, err = a.allocate(ctx, req)
	switch {
	case err == nil:
		log := a.cfg.Logger.With("biz_tag", tag, "request_id", id, "first", seg.First, "last", seg.Last)
		switch {
		case seg.Repaired && seg.FoundMaxID < floor:
			log.Error("REPAIRED rollback while granting a client range: the tag's max_id was below the highest id this instance was granted (restored backup or failover to a lagging replica?); raised it; bump the tag past the old high-water mark",
				"max_id_found", seg.FoundMaxID, "instance_floor", floor, "client_floor", r.Floor, "client_lead", seg.Lead)
		case seg.Repaired:
			// The caller's word alone, which anyone may give in the open
			// mode: no alarm of a rollback nothing here saw, but a line,
			// since a real one may be what the caller saw.
			log.Warn("RAISED max_id to a client's claimed floor: the client says it was granted ids above the tag's max_id (a rollback it saw, or a claim nothing here confirms); the lead was charged to it",
				"max_id_found", seg.FoundMaxID, "instance_floor", floor, "client_floor", r.Floor, "client_lead", seg.Lead)
		}
		log.Info("range granted to a client")
		return seg, false, nil
	case errors.Is(err, ErrUnknownTag), errors.Is(err, ErrInvalidTag):
		return Segment{}, false, err
	case errors.Is(err, ErrAlreadyGranted), errors.Is(err, ErrExhausted), errors.Is(err, ErrShareExhausted), errors.Is(err, ErrFloorBudget):
		// Granted before: find it. "Exhausted" and "no floor budget"
		// also look the request up, because a store that refuses the
		// bump never reaches the insert that would have said "granted
		// before" (a retry of a grant whose lead was spent).
		found, lerr := a.lookup(ctx, id)
		switch {
		case (lerr == nil || errors.Is(lerr, ErrGivenBack)) && !found.Holder.Matches(r.Holder):
			// The request ID is known to whoever read a log line or a
			// header: only its holder may have its range.
			a.cfg.Logger.Warn("REFUSED a grant retry: the request id belongs to another caller",
				"biz_tag", tag, "request_id", id, "caller", r.Holder.Principal)
			return Segment{}, false, fmt.Errorf("%w: request %s", ErrNotHolder, id)
		case (lerr == nil || errors.Is(lerr, ErrGivenBack)) && found.Tag != tag:
			return Segment{}, false, fmt.Errorf("%w: request %s was granted for %q", ErrRequestConflict, id, found.Tag)
		case errors.Is(lerr, ErrGivenBack):
			return Segment{}, false, fmt.Errorf("request %s: %w", id, lerr)
		case lerr == nil:
			a.cfg.Logger.Warn("RECOVERED client range by request id: a retry got the range granted before",
				"biz_tag", tag, "request_id", id, "first", found.First, "last", found.Last)
			return found, true, nil
		case errors.Is(lerr, ErrNotFound) && !errors.Is(err, ErrAlreadyGranted):
			return Segment{}, false, err
		}
		return Segment{}, false, fmt.Errorf("%w: look up request %s: %w", ErrUnavailable, id, lerr)
	}
	// Nothing final: ambiguous or refused by the server. The caller
	// retries with the same request ID.
	return Segment{}, false, fmt.Errorf("%w: grant request %s: %w", ErrUnavailable, id, err)
}

// GiveBackRange gives back [first, last], the unused tail of the range
// granted to request id, when h holds it and the store can take it back
// safely (see Granter.GiveBackRange): nobody was granted anything at or
// above first since. It
// reports whether it did; when it did not, the IDs stay a gap. A request
// held by another caller, or an instance's own, is ErrNotHolder. The caller
// must hand out none of the IDs afterwards, and must not retry a give-back
// whose answer it did not get: the first attempt may have succeeded.
func (a *Allocator) GiveBackRange(ctx context.Context, id uuid.UUID, h Holder, tag string, first, last int64) (bool, error) {
	if err := a.checkRange(tag, id); err != nil {
		return false, err
	}
	if first < 1 || first > last {
		return false, fmt.Errorf("give back [%d, %d]: want 1 <= first <= last", first, last)
	}
	if h.IsZero() {
		return false, fmt.Errorf("%w: request %s: no holder presented", ErrNotHolder, id)
	}
	ctx, cancel := context.WithTimeout(ctx, a.giveBackTimeout())
	defer cancel()
	ok, err := a.cfg.Store.GiveBackRange(ctx, id, h, tag, first, last)
	if errors.Is(err, ErrNotHolder) {
		a.cfg.Logger.Warn("REFUSED a give-back: the request id belongs to another caller",
			"biz_tag", tag, "request_id", id, "first", first, "last", last, "caller", h.Principal)
		return false, err
	}
	if err != nil {
		return false, fmt.Errorf("%w: give back request %s [%d, %d]: %w", ErrUnavailable, id, first, last, err)
	}
	a.cfg.Logger.Info("client range given back", "biz_tag", tag, "request_id", id, "first", first, "last", last, "given_back", ok)
	return ok, nil
}

func (a *Allocator) checkRange(tag string, id uuid.UUID) error {
	if a.set.Closed() {
		return ErrClosed
	}
	if id == uuid.Nil {
		return errors.New("request_id: must not be the nil UUID")
	}
	return ValidateTag(tag)
}
