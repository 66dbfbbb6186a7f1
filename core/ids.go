package core

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/wire"
)

// IDsRequest asks for IDs of Tag: Count of them (NextIDs; NextID takes
// one), as the list or, with Ranges, as inclusive ranges. Bad is what the
// adapter found wrong as it decoded the call (a biz_tag missing or given
// twice, a count that is no number): the core answers it once access
// control passed, as it answers every bad input, so that a caller refused
// learns nothing of its input's faults.
type IDsRequest struct {
	Tag    string
	Count  int
	Ranges bool
	Bad    error
}

// NextID returns the next ID of req.Tag. It is the hot path: in the open
// mode without per-address limits it costs one branch before the
// allocator's atomic take.
func (c *Core) NextID(ctx context.Context, who Caller, req IDsRequest) (int64, error) {
	if !c.fast {
		tag := req.Tag
		if req.Bad != nil {
			tag = ""
		}
		if _, err := c.admitIDs(ctx, who, tag, c.asked(req.Count)); err != nil {
			return 0, err
		}
	}
	if req.Bad != nil {
		return 0, req.Bad
	}
	if req.Tag == "" {
		return 0, ErrTagRequired
	}
	return c.cfg.Allocator.Next(ctx, req.Tag)
}

// NextIDs appends to dst the ranges of req.Count IDs of req.Tag. IDs taken
// before an error are handed out (fewer than the count, with the error)
// rather than lost: the caller answers what it got when it got any.
func (c *Core) NextIDs(ctx context.Context, who Caller, req IDsRequest, dst []segment.Range) ([]segment.Range, error) {
	if !c.fast {
		tag := req.Tag
		if req.Bad != nil {
			tag = ""
		}
		if _, err := c.admitIDs(ctx, who, tag, c.asked(req.Count)); err != nil {
			return dst, err
		}
	}
	switch {
	case req.Bad != nil:
		return dst, req.Bad
	case req.Tag == "":
		return dst, ErrTagRequired
	case req.Count < 1 || req.Count > c.cfg.MaxCount:
		return dst, c.CountError()
	}
	return c.cfg.Allocator.NextRanges(ctx, req.Tag, req.Count, dst)
}

// MaxCount is the largest count of NextIDs and NextSnowflakes.
func (c *Core) MaxCount() int { return c.cfg.MaxCount }

// CountError is the error of a count outside 1…MaxCount.
func (c *Core) CountError() error {
	return NewError(wire.CodeInvalidCount, fmt.Sprintf("count must be a whole number from 1 to %d", c.cfg.MaxCount))
}

// The errors of a missing or repeated tag, and of a bad format.
var (
	ErrTagRequired = NewError(wire.CodeInvalidTag, "biz_tag is required, e.g. /id?biz_tag=order")
	ErrTagTwice    = NewError(wire.CodeInvalidTag, "give biz_tag once")
	ErrFormat      = NewError(wire.CodeInvalidFormat, "format must be given at most once: list (the default) or ranges")
)

// anonymous is the principal of every caller in the open mode: there the
// holder key alone tells callers apart.
const anonymous = "anonymous"

// maxRangeSize bounds the size a caller may ask for: the schema's bound on
// a tag's step and max_step. The store bounds it further by the tag's own.
const maxRangeSize = 100_000_000

// holderKeyPattern is a holder key: 22 to 128 characters of the unpadded
// base64url alphabet, so at least 128 bits when random.
var holderKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{22,128}$`)

// GrantRequest is a range grant: the body of POST /v1/segments, and Bad,
// what the adapter found wrong decoding it (see IDsRequest).
type GrantRequest struct {
	wire.SegmentRequest
	Bad error
}

// GiveBackRequest is a give-back: the body of POST
// /v1/segments/giveback, and Bad (see IDsRequest).
type GiveBackRequest struct {
	wire.GiveBackRequest
	Bad error
}

// GrantRange grants the range of req.RequestID to the caller, the same one
// on every retry (Recovered then). Ranges are IDs: the ID operations'
// access control, the token's scope checked against the tag, and the ID
// limits charged by the IDs granted, a retry's as well: up front by the
// size asked, settled at the size granted. A floor may raise max_id above
// the tag's, skipping IDs nobody gets: that lead is IDs taken too, bounded
// up front by the caller's budget and charged at what it was (invariant 8).
func (c *Core) GrantRange(ctx context.Context, who Caller, req GrantRequest) (wire.SegmentResponse, error) {
	p, err := c.admitIDs(ctx, who, "", 0)
	if err != nil {
		return wire.SegmentResponse{}, err
	}
	id, err := validRange(req.Bad, req.Tag, req.RequestID, req.HolderKey)
	switch {
	case err != nil:
	case req.Size < 0 || req.Size > maxRangeSize:
		err = NewError(wire.CodeInvalidSize, fmt.Sprintf("size must be from 0 (the tag's step) to %d", maxRangeSize))
	case req.Floor < 0:
		err = NewError(wire.CodeInvalidFloor, "floor: want the highest id granted to the caller for the tag (0: none), as a decimal string")
	}
	if err != nil {
		return wire.SegmentResponse{}, err
	}
	if err := c.authorizeTag(p, req.Tag); err != nil {
		return wire.SegmentResponse{}, err
	}
	charge, refused := c.chargeIDs(who, p, req.Size, req.Floor > 0)
	if refused != nil {
		return wire.SegmentResponse{}, c.refuse(refused)
	}
	holder := allocator.NewHolder(c.principalOf(p), req.HolderKey)
	seg, recovered, err := c.cfg.Allocator.GrantRange(ctx, allocator.RangeRequest{ID: id, Tag: req.Tag, Size: req.Size, Holder: holder,
		Floor: req.Floor, MaxLead: charge.maxLead})
	if err != nil {
		charge.settle(0, charge.unsureLead(err))
		if errors.Is(err, allocator.ErrFloorBudget) {
			c.observeFloor(req.Tag, 0, true)
			return wire.SegmentResponse{}, c.refuse(charge.floorRefused())
		}
		return wire.SegmentResponse{}, err
	}
	charge.settle(seg.Last-seg.First+1, seg.Lead)
	if seg.Lead > 0 {
		c.observeFloor(req.Tag, seg.Lead, false)
	}
	resp := wire.SegmentResponse{Tag: req.Tag, RequestID: id.String(), First: seg.First, Last: seg.Last,
		Step: seg.Step, MaxStep: seg.MaxStep, Recovered: recovered, RunwaySeconds: seg.Runway.Seconds()}
	if c.cfg.Region != nil {
		share := c.cfg.Region.Holding(ctx, seg.First, seg.Last)
		resp.Region = &share
	}
	return resp, nil
}

// GiveBack gives the unused tail of a range back, from its holder only. A
// give-back takes no IDs but costs a statement: charged as one.
func (c *Core) GiveBack(ctx context.Context, who Caller, req GiveBackRequest) (wire.GiveBackResponse, error) {
	p, err := c.admitIDs(ctx, who, "", 0)
	if err != nil {
		return wire.GiveBackResponse{}, err
	}
	id, err := validRange(req.Bad, req.Tag, req.RequestID, req.HolderKey)
	if err == nil && (req.First < 1 || req.First > req.Last) {
		err = NewError(wire.CodeInvalidRange, "first and last: want 1 <= first <= last, as decimal strings")
	}
	if err != nil {
		return wire.GiveBackResponse{}, err
	}
	if err := c.authorizeTag(p, req.Tag); err != nil {
		return wire.GiveBackResponse{}, err
	}
	if _, refused := c.chargeIDs(who, p, 1, false); refused != nil {
		return wire.GiveBackResponse{}, c.refuse(refused)
	}
	holder := allocator.NewHolder(c.principalOf(p), req.HolderKey)
	ok, err := c.cfg.Allocator.GiveBackRange(ctx, id, holder, req.Tag, req.First, req.Last)
	if err != nil {
		return wire.GiveBackResponse{}, err
	}
	return wire.GiveBackResponse{Tag: req.Tag, RequestID: id.String(), First: req.First, Last: req.Last, GivenBack: ok}, nil
}

// validRange checks what a grant and a give-back share: the adapter's
// decoding (bad), the tag, the request ID and the holder key. Its errors
// never quote the holder key.
func validRange(bad error, tag, rid, key string) (uuid.UUID, error) {
	if bad != nil {
		return uuid.Nil, bad
	}
	if tag == "" {
		return uuid.Nil, NewError(wire.CodeInvalidTag, "biz_tag is required")
	}
	if err := allocator.ValidateTag(tag); err != nil {
		return uuid.Nil, NewError(wire.CodeInvalidTag, err.Error())
	}
	id, err := uuid.Parse(rid)
	if err != nil || id == uuid.Nil || len(rid) != 36 {
		return uuid.Nil, NewError(wire.CodeInvalidRequestID, "request_id: want a UUID (e.g. a UUIDv7) in its 36-character form, chosen once and reused on every retry")
	}
	if !holderKeyPattern.MatchString(key) {
		return uuid.Nil, NewError(wire.CodeInvalidHolderKey, "holder_key: want a secret of 22 to 128 characters of [A-Za-z0-9_-] (e.g. 32 random bytes in unpadded base64url), chosen with the request_id and sent again on every retry and give-back")
	}
	return id, nil
}

// principalOf returns who asks, for the holder of a range: the bearer
// token's ID in the token mode, and "anonymous" for everyone in the open
// mode.
func (c *Core) principalOf(p *principal) string {
	if p != nil && c.cfg.Auth.IDs == AuthToken {
		return "token:" + p.token.ID
	}
	return anonymous
}

func (c *Core) observeFloor(tag string, lead int64, refused bool) {
	if c.cfg.OnFloor != nil {
		c.cfg.OnFloor(tag, lead, refused)
	}
}
