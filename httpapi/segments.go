package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/wire"
)

// anonymous is the principal of every caller in the open mode: there the
// holder key alone tells callers apart.
const anonymous = "anonymous"

// maxRangeSize bounds the size a caller may ask for: the schema's bound on
// a tag's step and max_step. The store bounds it further by the tag's own.
const maxRangeSize = 100_000_000

// SegmentGranter is what the range endpoints need (part of Allocator):
// allocator.Allocator implements it.
type SegmentGranter interface {
	GrantRange(ctx context.Context, req allocator.RangeRequest) (allocator.Segment, bool, error)
	GiveBackRange(ctx context.Context, id uuid.UUID, h allocator.Holder, tag string, first, last int64) (bool, error)
}

var _ SegmentGranter = (*allocator.Allocator)(nil)

// segmentsRouter serves the range endpoints, to be mounted at /v1/segments
// (and wrapped by whatever guards /v1).
func (s *Server) segmentsRouter(g SegmentGranter) chi.Router {
	r := chi.NewRouter()
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.WriteError(w, r, requestError(wire.CodeMethod, "method "+truncate(r.Method, 16)+" not allowed; use POST"))
	})
	r.Post("/", func(w http.ResponseWriter, r *http.Request) { s.handleGrant(w, r, g) })
	r.Post("/giveback", func(w http.ResponseWriter, r *http.Request) { s.handleGiveBack(w, r, g) })
	return r
}

func (s *Server) handleGrant(w http.ResponseWriter, r *http.Request, g SegmentGranter) {
	var req wire.SegmentRequest
	id, err := decodeRange(w, r, &req, func() (string, string, string) { return req.Tag, req.RequestID, req.HolderKey })
	switch {
	case err != nil:
	case req.Size < 0 || req.Size > maxRangeSize:
		err = requestError(wire.CodeInvalidSize, fmt.Sprintf("size must be from 0 (the tag's step) to %d", maxRangeSize))
	case req.Floor < 0:
		err = requestError(wire.CodeInvalidFloor, "floor: want the highest id granted to the caller for the tag (0: none), as a decimal string")
	}
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	if err := s.AuthorizeTag(r, req.Tag); err != nil {
		s.WriteError(w, r, err)
		return
	}
	// Ranges are charged to the ID limits by the IDs granted, a retry's
	// as well: up front by the size asked, settled at the size granted.
	// A floor may raise max_id above the tag's, skipping IDs nobody gets:
	// that lead is IDs taken too, bounded up front by the caller's budget
	// and charged at what it was (invariant 8).
	charge, refused := s.chargeIDs(r, req.Size, req.Floor > 0)
	if refused != nil {
		s.WriteError(w, r, refused)
		return
	}
	holder := allocator.NewHolder(s.principalOf(r), req.HolderKey)
	seg, recovered, err := g.GrantRange(r.Context(), allocator.RangeRequest{ID: id, Tag: req.Tag, Size: req.Size, Holder: holder,
		Floor: req.Floor, MaxLead: charge.maxLead})
	if err != nil {
		charge.settle(0, charge.unsureLead(err))
		if errors.Is(err, allocator.ErrFloorBudget) {
			s.cfg.Metrics.observeFloor(req.Tag, 0, true)
			err = charge.floorRefused()
		}
		s.WriteError(w, r, err)
		return
	}
	charge.settle(seg.Last-seg.First+1, seg.Lead)
	if seg.Lead > 0 {
		s.cfg.Metrics.observeFloor(req.Tag, seg.Lead, false)
	}
	writeJSON(w, http.StatusOK, wire.SegmentResponse{
		Tag: req.Tag, RequestID: id.String(), First: seg.First, Last: seg.Last,
		Step: seg.Step, MaxStep: seg.MaxStep, Recovered: recovered, RunwaySeconds: seg.Runway.Seconds(),
	})
}

func (s *Server) handleGiveBack(w http.ResponseWriter, r *http.Request, g SegmentGranter) {
	var req wire.GiveBackRequest
	id, err := decodeRange(w, r, &req, func() (string, string, string) { return req.Tag, req.RequestID, req.HolderKey })
	if err == nil && (req.First < 1 || req.First > req.Last) {
		err = requestError(wire.CodeInvalidRange, "first and last: want 1 <= first <= last, as decimal strings")
	}
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	if err := s.AuthorizeTag(r, req.Tag); err != nil {
		s.WriteError(w, r, err)
		return
	}
	// A give-back takes no IDs but costs a statement: charged as one.
	if _, refused := s.chargeIDs(r, 1, false); refused != nil {
		s.WriteError(w, r, refused)
		return
	}
	holder := allocator.NewHolder(s.principalOf(r), req.HolderKey)
	ok, err := g.GiveBackRange(r.Context(), id, holder, req.Tag, req.First, req.Last)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.GiveBackResponse{Tag: req.Tag, RequestID: id.String(), First: req.First, Last: req.Last, GivenBack: ok})
}

// principalOf returns who asks, for the holder of a range: the bearer
// token's ID in the token mode (the middleware authenticated it), and
// "anonymous" for everyone in the open mode.
func (s *Server) principalOf(r *http.Request) string {
	if p, _ := r.Context().Value(principalKey{}).(*principal); p != nil && s.cfg.Auth.IDs == AuthToken {
		return "token:" + p.token.ID
	}
	return anonymous
}

// holderKeyPattern is a holder key: 22 to 128 characters of the unpadded
// base64url alphabet, so at least 128 bits when random.
var holderKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{22,128}$`)

// maxRangeBody bounds the body of a range request.
const maxRangeBody = 4 << 10

// decodeRange reads one JSON object into dst and validates the tag,
// request ID and holder key that fields returns. Its errors never quote the
// holder key.
func decodeRange(w http.ResponseWriter, r *http.Request, dst any, fields func() (tag, requestID, holderKey string)) (uuid.UUID, error) {
	if err := decodeBody(w, r, maxRangeBody, dst); errors.Is(err, errBodyTooLarge) {
		return uuid.Nil, requestError(wire.CodeBadRequest, fmt.Sprintf("body larger than %d bytes", maxRangeBody))
	} else if err != nil {
		return uuid.Nil, requestError(wire.CodeBadRequest, err.Error())
	}
	tag, rid, key := fields()
	if tag == "" {
		return uuid.Nil, requestError(wire.CodeInvalidTag, "biz_tag is required")
	}
	if err := allocator.ValidateTag(tag); err != nil {
		return uuid.Nil, requestError(wire.CodeInvalidTag, err.Error())
	}
	id, err := uuid.Parse(rid)
	if err != nil || id == uuid.Nil || len(rid) != 36 {
		return uuid.Nil, requestError(wire.CodeInvalidRequestID, "request_id: want a UUID (e.g. a UUIDv7) in its 36-character form, chosen once and reused on every retry")
	}
	if !holderKeyPattern.MatchString(key) {
		return uuid.Nil, requestError(wire.CodeInvalidHolderKey, "holder_key: want a secret of 22 to 128 characters of [A-Za-z0-9_-] (e.g. 32 random bytes in unpadded base64url), chosen with the request_id and sent again on every retry and give-back")
	}
	return id, nil
}
