package httpapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/wire"
)

// The range endpoints (core: GrantRange, GiveBack). The caller is
// prechecked from its headers before the body is read; the core checks
// it whole, with the tag and the limits, once the body is decoded.

func (s *Server) handleGrant(w http.ResponseWriter, r *http.Request) {
	who := callerOf(r)
	if err := s.core.Precheck(r.Context(), who, core.AccessIDs); err != nil {
		s.WriteError(w, r, err)
		return
	}
	var req core.GrantRequest
	req.Bad = decodeRange(w, r, &req.SegmentRequest)
	out, err := s.core.GrantRange(r.Context(), who, req)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleGiveBack(w http.ResponseWriter, r *http.Request) {
	who := callerOf(r)
	if err := s.core.Precheck(r.Context(), who, core.AccessIDs); err != nil {
		s.WriteError(w, r, err)
		return
	}
	var req core.GiveBackRequest
	req.Bad = decodeRange(w, r, &req.GiveBackRequest)
	out, err := s.core.GiveBack(r.Context(), who, req)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// maxRangeBody bounds the body of a range request.
const maxRangeBody = 4 << 10

// decodeRange reads one JSON object of at most maxRangeBody bytes into
// dst; the core validates its fields.
func decodeRange(w http.ResponseWriter, r *http.Request, dst any) error {
	if err := decodeBody(w, r, maxRangeBody, dst); errors.Is(err, errBodyTooLarge) {
		return newError(wire.CodeBadRequest, fmt.Sprintf("body larger than %d bytes", maxRangeBody))
	} else if err != nil {
		return newError(wire.CodeBadRequest, err.Error())
	}
	return nil
}
